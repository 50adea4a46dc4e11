"""A tiny stock inventory."""


class Inventory:
    def __init__(self):
        self.items = {}  # name -> (count, unit price)

    def add(self, name, count, price):
        old, _ = self.items.get(name, (0, price))
        self.items[name] = (old + count, price)

    def remove(self, name, count):
        have, price = self.items[name]
        if count > have:
            raise ValueError(f"only {have} {name} in stock")
        left = have - count
        self.items[name] = (left, price)

    def total_value(self):
        return sum(count + price for count, price in self.items.values())

    def names(self):
        return sorted(self.items)
