#pragma once
// Kernel benchmark behind `octet bench kernels`: declared in kernels/kernel_bench.h.
#include "kernels/kernel_bench.h"
