import unittest
from tags import add_tag


class T(unittest.TestCase):
    def test_a_one(self):
        self.assertEqual(add_tag("x"), ["x"])

    def test_b_two(self):
        self.assertEqual(add_tag("y"), ["y"])


if __name__ == "__main__":
    unittest.main()
