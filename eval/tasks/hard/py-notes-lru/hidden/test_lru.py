import unittest
from lru import LRU


class T(unittest.TestCase):
    def test_report(self):
        c = LRU(2)
        c.put("a", 1)
        c.put("b", 2)
        self.assertEqual(c.get("a"), 1)
        c.put("c", 3)
        self.assertEqual(sorted(c.data), ["a", "c"])

    def test_plain_eviction(self):
        c = LRU(3)
        for i, k in enumerate("wxyz"):
            c.put(k, i)
        self.assertIsNone(c.get("w"))
        self.assertEqual(c.get("x"), 1)
        self.assertEqual(len(c), 3)
        c.put("x", 9)
        c.put("q", 5)
        self.assertEqual(sorted(c.data), ["q", "x", "z"])
        self.assertEqual(c.get("missing", 7), 7)


if __name__ == "__main__":
    unittest.main()
