#include <stdio.h>
#include "search.h"

static int fails = 0;
#define CHECK(c) do { if (!(c)) { printf("failed: %s\n", #c); fails++; } } while (0)

int main(void) {
    unsigned a[] = {1, 3, 3, 7, 9};
    CHECK(lower_bound(a, 5, 3) == 1);
    CHECK(lower_bound(a, 5, 8) == 4);
    CHECK(lower_bound(a, 5, 10) == 5);
    CHECK(midpoint(2, 8) == 5);
    CHECK(midpoint(4000000000u, 4000000002u) == 4000000001u);
    CHECK(midpoint(4294967295u, 4294967293u) == 4294967294u);
    if (!fails) printf("ok\n");
    return fails != 0;
}
