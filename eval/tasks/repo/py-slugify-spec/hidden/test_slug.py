import unittest
from textutil import slugify, title_case


class T(unittest.TestCase):
    def test_examples(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")
        self.assertEqual(slugify("  C++ & Rust  "), "c-rust")
        self.assertEqual(slugify("one two three", max_len=8), "one-two")
        self.assertEqual(slugify("!!!"), "")

    def test_more(self):
        self.assertEqual(slugify("Café au lait"), "caf-au-lait")
        self.assertEqual(slugify("a--b__c"), "a-b-c")
        self.assertEqual(slugify("abc", max_len=10), "abc")
        self.assertEqual(slugify("abcdef", max_len=3), "abc")
        self.assertEqual(title_case("hello wORLD"), "Hello World")


if __name__ == "__main__":
    unittest.main()
