import unittest
from inventory import Inventory


class T(unittest.TestCase):
    def test_value(self):
        inv = Inventory()
        inv.add("bolt", 10, 0.5)
        inv.add("nut", 4, 0.25)
        self.assertAlmostEqual(inv.total_value(), 6.0)

    def test_remove_to_zero(self):
        inv = Inventory()
        inv.add("bolt", 3, 1.0)
        inv.add("nut", 2, 1.0)
        inv.remove("bolt", 3)
        self.assertEqual(inv.names(), ["nut"])
        inv.remove("nut", 1)
        self.assertEqual(inv.names(), ["nut"])
        self.assertAlmostEqual(inv.total_value(), 1.0)
        with self.assertRaises(ValueError):
            inv.remove("nut", 5)


if __name__ == "__main__":
    unittest.main()
