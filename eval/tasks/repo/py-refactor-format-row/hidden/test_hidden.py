import inspect
import unittest
import report


class T(unittest.TestCase):
    def test_format_row(self):
        self.assertEqual(report.format_row(" big box ", 2), "Big Box                   2.00")
        self.assertEqual(report.format_row("x", 1234.567), "X                      1234.57")

    def test_reports_use_it(self):
        calls = []
        real = report.format_row

        def spy(name, value):
            calls.append(name)
            return real(name, value)

        report.format_row = spy
        try:
            for f in (report.sales_report, report.stock_report, report.cost_report):
                calls.clear()
                out = f([("a", 1), ("b", 2)])
                self.assertEqual(calls, ["a", "b"], f.__name__)
                self.assertEqual(out, "A                         1.00\nB                         2.00")
        finally:
            report.format_row = real
        src = inspect.getsource(report)
        self.assertEqual(src.count(":<20}"), 1, "the formatting still appears more than once")


if __name__ == "__main__":
    unittest.main()
