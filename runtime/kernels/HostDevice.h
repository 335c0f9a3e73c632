//===- kernels/HostDevice.h - Code written once for the host and nvcc ------===//
#ifndef MOERT_KERNELS_HOSTDEVICE_H
#define MOERT_KERNELS_HOSTDEVICE_H

#if defined(__CUDACC__)
#define MOERT_HOST_DEVICE __host__ __device__
#else
#define MOERT_HOST_DEVICE
#endif

#endif
