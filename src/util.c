#include "util.h"

#include <math.h>
#include <stdio.h>

dd_status dd_fail(dd_error *err, dd_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

void dd_error_clear(dd_error *err) {
    if (err) {
        err->code = DD_OK;
        err->msg[0] = 0;
    }
}

const char *dd_status_name(dd_status s) {
    switch (s) {
    case DD_OK: return "ok";
    case DD_EINVAL: return "invalid argument";
    case DD_EIO: return "i/o error";
    case DD_EFORMAT: return "malformed file";
    case DD_EMODEL: return "invalid model";
    case DD_ENOMEM: return "out of memory";
    case DD_ENUMERIC: return "numeric error";
    case DD_EUNSUPPORTED: return "unsupported";
    }
    return "unknown status";
}

const char *dd_dtype_name(dd_dtype t) {
    switch (t) {
    case DD_F32: return "f32";
    case DD_F16: return "f16";
    case DD_BF16: return "bf16";
    case DD_Q8: return "q8";
    case DD_Q4: return "q4";
    }
    return "?";
}

float dd_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float f = (float)man * 0x1p-24f;
        memcpy(&u, &f, 4);
        u |= sign;
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t dd_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {
        /* result subnormal or zero: round a * 2^24 to nearest even integer */
        float x;
        memcpy(&x, &a, 4);
        float r = nearbyintf(x * 0x1p24f); /* default rounding mode: to nearest even */
        return (uint16_t)(sign | (uint32_t)r);
    }
    uint32_t rounded = a + 0xfffu + ((a >> 13) & 1);
    return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}

uint16_t dd_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
