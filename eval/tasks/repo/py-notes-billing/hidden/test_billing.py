import datetime as dt
import unittest
from billing import next_month, period_end, periods


class T(unittest.TestCase):
    def test_december(self):
        self.assertEqual(next_month(2024, 12), (2025, 1))
        self.assertEqual(next_month(2024, 5), (2024, 6))
        self.assertEqual(period_end(dt.date(2024, 12, 1)), dt.date(2024, 12, 31))
        p = periods(dt.date(2024, 11, 1), 3)
        self.assertEqual([e for _, e in p], [dt.date(2024, 11, 30), dt.date(2024, 12, 31), dt.date(2025, 1, 31)])


if __name__ == "__main__":
    unittest.main()
