/* Internal helpers shared by every part of the library: error filling, checked size arithmetic, half floats. */
#ifndef DD_UTIL_H
#define DD_UTIL_H

#include "depthdec.h"

#include <stdarg.h>
#include <stdint.h>
#include <string.h>

/* Fill *err (when not NULL) with code and a printf-style message; returns code so callers can `return dd_fail(...)`. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
dd_status dd_fail(dd_error *err, dd_status code, const char *fmt, ...);

/* Reset *err to DD_OK with an empty message (err may be NULL). */
void dd_error_clear(dd_error *err);

/* a*b and a+b in size_t; return 0 on overflow (result untouched), 1 on success. */
static inline int dd_mul_ok(size_t a, size_t b, size_t *r) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *r = a * b;
    return 1;
}
static inline int dd_add_ok(size_t a, size_t b, size_t *r) {
    if (b > SIZE_MAX - a) return 0;
    *r = a + b;
    return 1;
}

/* IEEE half / bfloat16 <-> float. Exact for every input (NaN payloads kept as NaN; round-to-nearest-even). */
float dd_f16_to_f32(uint16_t h);
uint16_t dd_f32_to_f16(float f);
static inline float dd_bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
uint16_t dd_f32_to_bf16(float f);

/* Unaligned little-endian loads (MLX files may place tensors at odd offsets). */
static inline uint16_t dd_ld16(const void *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t dd_ld32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline float dd_ldf32(const void *p) { float v; memcpy(&v, p, 4); return v; }

#endif
