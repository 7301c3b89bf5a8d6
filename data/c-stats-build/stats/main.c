/* stats: read one number per line from stdin and print summary statistics. */
#include <stdio.h>
#include <stdlib.h>

#include "stats.h"

int main(void)
{
    size_t n = 0, capacity = 16;
    double *values = malloc(capacity * sizeof *values);
    double x;

    while (scanf("%lf", &x) == 1) {
        if (n == capacity) {
            capacity *= 2;
            values = realloc(values, capacity * sizeof *values);
        }
        values[n++] = x;
    }
    if (n == 0) {
        fprintf(stderr, "stats: no data\n");
        return 1;
    }
    printf("count=%zu\n", n);
    printf("min=%.3f\n", stats_min(values, n));
    printf("max=%.3f\n", stats_max(values, n));
    printf("mean=%.3f\n", stats_mean(values, n));
    printf("median=%.3f\n", stats_median(values, n));
    printf("stddev=%.3f\n", stats_stddev(values, n));
    free(values);
    return 0;
}
