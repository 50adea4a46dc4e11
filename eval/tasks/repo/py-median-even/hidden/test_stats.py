import unittest
import stats


class T(unittest.TestCase):
    def test_median(self):
        self.assertEqual(stats.median([1, 2, 3, 4]), 2.5)
        self.assertEqual(stats.median([4, 1, 3, 2]), 2.5)
        self.assertEqual(stats.median([5]), 5)
        self.assertEqual(stats.median([3, 1, 2]), 2)
        self.assertEqual(stats.median([1, 10]), 5.5)
        with self.assertRaises(ValueError):
            stats.median([])

    def test_mean(self):
        self.assertEqual(stats.mean([1, 2, 3, 4]), 2.5)


if __name__ == "__main__":
    unittest.main()
