/* The price tables shipped in configs/prices/, compiled into the library by CMake
 * (core/CMakeLists.txt writes prices_builtin.c from the YAML files). */
#ifndef BIVOUAC_PRICES_BUILTIN_H
#define BIVOUAC_PRICES_BUILTIN_H

/* The YAML text of the shipped table `name` (the file's name without .yaml), or NULL. */
const char *bv_prices_builtin(const char *name);

#endif
