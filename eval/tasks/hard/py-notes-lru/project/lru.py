"""A least-recently-used cache with a size limit."""

from collections import OrderedDict


class LRU:
    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.data = OrderedDict()  # oldest use first

    def get(self, key, default=None):
        if key not in self.data:
            return default

        return self.data[key]

    def put(self, key, value):
        if key in self.data:
            self.data.move_to_end(key)
        self.data[key] = value
        if len(self.data) > self.capacity:
            self.data.popitem(last=True)

    def __len__(self):
        return len(self.data)
