// A stand-in for NCCL's <nccl.h> (the part ampd uses), for the CPU emulator
// of CUDA: the ranks of one communicator are threads or processes of one
// machine, meeting in a directory under /tmp that the unique id names. A collective waits for its
// stream (its inputs are then final), meets the other ranks, and writes every rank's result before
// any returns: eager where NCCL is asynchronous, which only makes it stricter (ampd waits for the
// stream right after each collective anyway). Buffers must be device memory (cudaMalloc), as on a
// GPU. See nccl_emu.cc.
#ifndef AMPD_CUDA_EMU_NCCL_H_
#define AMPD_CUDA_EMU_NCCL_H_

#include <cstddef>

#include "cuda_runtime.h"

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

struct ncclComm;
typedef struct ncclComm* ncclComm_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef enum { ncclFloat32 = 7, ncclFloat = 7 } ncclDataType_t;

ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
// Grouping only batches launches in NCCL; the stand-in runs each collective
// as it is called, so these only check that they pair up.
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
const char* ncclGetErrorString(ncclResult_t result);

#endif  // AMPD_CUDA_EMU_NCCL_H_
