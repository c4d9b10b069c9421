/* SPDX-License-Identifier: MIT */
/* backends/nccl/nccl_error.c: turning ncclResult_t / cudaError_t into accel
 * statuses and messages that say what to do, and the type mapping. */
#include <stdio.h>
#include <string.h>

#include "nccl-impl.h"

const char *accel_nccl_result_name(ncclResult_t result)
{
	switch (result) {
	case ncclSuccess: return "ncclSuccess";
	case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
	case ncclSystemError: return "ncclSystemError";
	case ncclInternalError: return "ncclInternalError";
	case ncclInvalidArgument: return "ncclInvalidArgument";
	case ncclInvalidUsage: return "ncclInvalidUsage";
	case ncclRemoteError: return "ncclRemoteError";
	case ncclInProgress: return "ncclInProgress";
	default: return "ncclResult_t (unknown)";
	}
}

static const char *nccl_hint(ncclResult_t result)
{
	switch (result) {
	case ncclUnhandledCudaError:
		return "A CUDA call inside NCCL failed: check the GPU with nvidia-smi and that "
		       "each rank has its own device (CUDA_VISIBLE_DEVICES, local rank)";
	case ncclSystemError:
		return "A system call failed (sockets, shared memory): run with NCCL_DEBUG=INFO, "
		       "make /dev/shm large enough (containers: --shm-size) and set "
		       "NCCL_SOCKET_IFNAME to an interface the nodes can reach";
	case ncclInternalError:
		return "An internal NCCL error: run with NCCL_DEBUG=INFO and report it with the log";
	case ncclInvalidArgument:
		return "NCCL rejected an argument: every rank must call the same collective with "
		       "the same count and dtype, on buffers on its own GPU";
	case ncclInvalidUsage:
		return "NCCL rejected the usage: two ranks cannot share a GPU and all ranks must "
		       "issue collectives in the same order (NCCL_DEBUG=WARN names the problem)";
	case ncclRemoteError:
		return "A peer rank failed or disconnected: the first error is in another "
		       "rank's log";
	case ncclInProgress:
		return "The operation had not finished";
	default:
		return "Run with NCCL_DEBUG=INFO for details";
	}
}

int accel_nccl_describe_nccl(ncclResult_t result, const char *call, const char *detail,
                             char *buf, size_t cap)
{
	const char *text = ncclGetErrorString(result);
	int has_detail = detail && *detail;
	snprintf(buf, cap, "%s failed: %s (%s)%s%s. %s", call ? call : "an NCCL call",
	         text ? text : "unknown error", accel_nccl_result_name(result),
	         has_detail ? ": " : "", has_detail ? detail : "", nccl_hint(result));
	/* a peer that failed or went away is the comm ABI's "dead peer" */
	return result == ncclRemoteError ? ACCEL_ERR_PEER : ACCEL_ERR_NCCL;
}

static const char *cuda_hint(cudaError_t err)
{
	switch (err) {
	case cudaErrorNoDevice:
		return "No CUDA device is visible: check nvidia-smi and CUDA_VISIBLE_DEVICES";
	case cudaErrorInsufficientDriver:
		return "The NVIDIA driver is older than this CUDA runtime: update the driver or "
		       "build accel with a matching CUDA toolkit";
	case cudaErrorInvalidDevice:
		return "The device index is out of range: each rank uses cuda:<local rank> unless "
		       "configured; check CUDA_VISIBLE_DEVICES and the processes per node";
	case cudaErrorMemoryAllocation:
		return "The GPU is out of memory: lower the batch or bucket size, or stop other "
		       "processes holding GPU memory (nvidia-smi)";
	case cudaErrorDevicesUnavailable:
		return "The GPU is busy or in exclusive-process mode and used by another process";
	case cudaErrorIllegalAddress:
	case cudaErrorLaunchFailure:
		return "A kernel faulted and the CUDA context is unusable: find the kernel with "
		       "compute-sanitizer";
	default:
		return "Check nvidia-smi and the CUDA installation";
	}
}

int accel_nccl_describe_cuda(cudaError_t err, const char *call, char *buf, size_t cap)
{
	const char *text = cudaGetErrorString(err), *name = cudaGetErrorName(err);
	snprintf(buf, cap, "%s failed: %s (%s). %s", call ? call : "a CUDA call",
	         text ? text : "unknown error", name ? name : "cudaError_t", cuda_hint(err));
	return ACCEL_ERR_CUDA;
}

int accel_nccl_dtype(uint32_t dtype, int reduce, ncclDataType_t *ret_type)
{
	ncclDataType_t t;
	switch (dtype) {
	case ACCEL_DTYPE_F32: t = ncclFloat32; break;
	case ACCEL_DTYPE_F64: t = ncclFloat64; break;
	case ACCEL_DTYPE_F16: t = ncclFloat16; break;
	case ACCEL_DTYPE_BF16: t = ncclBfloat16; break;
	case ACCEL_DTYPE_I32: t = ncclInt32; break;
	case ACCEL_DTYPE_I64: t = ncclInt64; break;
	case ACCEL_DTYPE_U8:
	case ACCEL_DTYPE_F8E4M3:
	case ACCEL_DTYPE_F8E5M2:
		if (reduce)
			return 0;
		t = ncclUint8;
		break;
	default:
		return 0;
	}
	*ret_type = t;
	return 1;
}

int accel_nccl_redop(uint32_t red, ncclRedOp_t *ret_op)
{
	switch (red) {
	case ACCEL_RED_SUM: *ret_op = ncclSum; return 1;
	case ACCEL_RED_AVG: *ret_op = ncclAvg; return 1;
	case ACCEL_RED_MAX: *ret_op = ncclMax; return 1;
	case ACCEL_RED_MIN: *ret_op = ncclMin; return 1;
	default: return 0;
	}
}


void accel_nccl_timeout_text(char *buf, size_t cap, const char *what, int on_stream,
                             double timeout_s, const char *self, int named,
                             const char *missing, int no_store)
{
	const char *why =
		named > 0 ? missing
		: named == 0
			? "every rank reached it and timed out there too, so NCCL itself is stuck (run "
			  "with NCCL_DEBUG=INFO; check the network between the nodes) or the ranks came "
			  "too far apart (raise comm.timeout_s)"
		: no_store
			? "the other ranks did not arrive at it, and this job has no rendezvous store to "
			  "ask which are missing (under mpirun comm.mpi_store makes one unless it is "
			  "false or a rank could not reach it, see the start-up warnings; or start the "
			  "job with ACCEL_MASTER_ADDR and ACCEL_MASTER_PORT); look for the rank whose "
			  "log stops before it, or that died"
			: "the other ranks did not arrive at it, and the store could not tell which are "
			  "missing; look for the rank whose log stops before it, or that died";
	if (!buf || !cap)
		return;
	snprintf(buf, cap, "%s%s did not complete within %.1f s on %s: %s%s. The communicator "
	         "was aborted", what, on_stream ? ", waited for on a stream," : "", timeout_s, self,
	         why, named > 0 ? " (asked through the rendezvous store)" : "");
}
