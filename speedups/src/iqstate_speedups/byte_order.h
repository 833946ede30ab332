/*
 * Keys in the order the engines keep them: bytewise, a prefix before its extensions.
 */
#ifndef IQSTATE_BYTE_ORDER_H
#define IQSTATE_BYTE_ORDER_H

#include <Python.h>
#include <string.h>

/* <0, 0 or >0 as `first` sorts before, with or after `second`. */
static inline int
byte_order(const void *first, Py_ssize_t first_size, const void *second, Py_ssize_t second_size)
{
    Py_ssize_t common = first_size < second_size ? first_size : second_size;
    int order = memcmp(first, second, (size_t)common);
    return order != 0 ? order : (first_size > second_size) - (first_size < second_size);
}

#endif
