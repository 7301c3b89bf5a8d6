#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"

static int compare_doubles(const void *a, const void *b)
{
    return (int)(*(const double *)a - *(const double *)b);
}

double stats_min(const double *values, size_t n)
{
    double best = values[0];
    for (size_t i = 1; i < n; i++)
        if (values[i] < best)
            best = values[i];
    return best;
}

double stats_max(const double *values, size_t n)
{
    double best = values[0];
    for (size_t i = 1; i < n; i++)
        if (values[i] > best)
            best = values[i];
    return best;
}

double stats_mean(const double *values, size_t n)
{
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += values[i];
    return sum / n;
}

double stats_median(const double *values, size_t n)
{
    double *sorted = malloc(n * sizeof *sorted);
    memcpy(sorted, values, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, compare_doubles);
    double result = sorted[n / 2];
    free(sorted);
    return result;
}

double stats_stddev(const double *values, size_t n)
{
    double mean = stats_mean(values, n);
    double sum_sq = 0.0;
    for (size_t i = 0; i < n; i++)
        sum_sq += (values[i] - mean) * (values[i] - mean);
    return sqrt(sum_sq / n);
}
