// A probe kernel that measures the SM clock where it runs in a stream (see clock_probe.cu).
#pragma once
#include <cuda_runtime.h>

// Enqueues one ~20 us single-thread kernel on s that writes the SM clock in MHz to out[slot] (device memory).
void launch_clock_probe(float* out, int slot, cudaStream_t s);
