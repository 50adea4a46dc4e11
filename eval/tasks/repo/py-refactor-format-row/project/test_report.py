import unittest
import report


class T(unittest.TestCase):
    def test_reports(self):
        rows = [("  apples ", 3.5), ("pears", 10)]
        want = "Apples                    3.50\nPears                    10.00"
        self.assertEqual(report.sales_report(rows), want)
        self.assertEqual(report.stock_report(rows), want)
        self.assertEqual(report.cost_report(rows), want)
        self.assertEqual(report.sales_report([]), "")


if __name__ == "__main__":
    unittest.main()
