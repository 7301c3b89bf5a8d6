#ifndef STATS_H
#define STATS_H

#include <stddef.h>

double stats_min(const double *values, size_t n);
double stats_max(const double *values, size_t n);
double stats_mean(const double *values, size_t n);
double stats_median(const double *values, size_t n);
double stats_stddev(const double *values, size_t n); /* population standard deviation */

#endif
