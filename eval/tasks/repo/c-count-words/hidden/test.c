#include <stdio.h>
#include "wordcount.h"

static int fails = 0;
static void eq(const char *s, int want) {
    int got = count_words(s);
    if (got != want) {
        printf("count_words(\"%s\") = %d, want %d\n", s, got, want);
        fails++;
    }
}

int main(void) {
    eq("", 0);
    eq("a", 1);
    eq("a b", 2);
    eq("a  b", 2);
    eq("  leading and trailing  ", 3);
    eq("tabs\tand\nnewlines", 3);
    eq("   ", 0);
    return fails != 0;
}
