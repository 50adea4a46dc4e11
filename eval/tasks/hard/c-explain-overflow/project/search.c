#include "search.h"

/* Index of the first element of a[0..n) that is >= x (n if none); a is sorted. */
unsigned lower_bound(const unsigned *a, unsigned n, unsigned x) {
    unsigned lo = 0, hi = n;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The midpoint of two values, rounded down. */
unsigned midpoint(unsigned a, unsigned b) {
    return (a + b) / 2;
}
