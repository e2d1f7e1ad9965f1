// Security review 3's N4 on the GPU: memory its owner frees while another
// process holds it open by IPC, that process's context broken by a fault
// (its close fails, so the driver keeps the memory until it exits).
// The owner then allocates as much again. Natively the GPU holds both; under
// qcuda run with a quota below both, the opener's worker is ended before the
// owner's bytes leave the quota (docs/security.md, "memory another process
// still has open"), so the VM never holds more than its quota. What each
// step answers is printed; run-ipchold.sh samples the GPU's used memory.
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>

static const size_t kBytes = 8ul << 30;

__global__ void fault(int *p) { *(volatile int *)((char *)p - (1ul << 40)) = 1; }

static double now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

// The opener: another process of the VM, with a worker of its own.
static int opener(int in, int out) {
  cudaIpcMemHandle_t h;
  void *p = nullptr;
  char c = 1;
  if (read(in, &h, sizeof h) != sizeof h) return 1;
  printf("opener: open %s\n", cudaGetErrorName(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess)));
  fault<<<1, 1>>>(static_cast<int *>(p));
  printf("opener: after a faulting kernel, synchronize %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
  fflush(stdout);
  (void)!write(out, &c, 1);
  (void)!read(in, &c, 1);  // the owner has freed and allocated again
  printf("opener: close %s\n", cudaGetErrorName(cudaIpcCloseMemHandle(p)));
  return 0;
}

int main() {
  int to_opener[2], to_owner[2];
  char c = 1;
  if (pipe(to_opener) || pipe(to_owner)) return 1;
  pid_t pid = fork();
  if (pid == 0) return opener(to_opener[0], to_owner[1]);
  void *d = nullptr, *again = nullptr;
  cudaIpcMemHandle_t h;
  printf("owner: 8 GiB %s\n", cudaGetErrorName(cudaMalloc(&d, kBytes)));
  cudaMemset(d, 0, kBytes);
  cudaDeviceSynchronize();
  printf("owner: handle %s\n", cudaGetErrorName(cudaIpcGetMemHandle(&h, d)));
  (void)!write(to_opener[1], &h, sizeof h);
  (void)!read(to_owner[0], &c, 1);
  double t0 = now();
  cudaError_t e = cudaFree(d);
  printf("owner: free %s after %.1f s\n", cudaGetErrorName(e), now() - t0);
  e = cudaMalloc(&again, kBytes);
  if (e == cudaSuccess) e = cudaMemset(again, 1, kBytes);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  printf("owner: 8 GiB again %s\n", cudaGetErrorName(e));
  fflush(stdout);
  sleep(2);  // the GPU's memory sampled meanwhile
  (void)!write(to_opener[1], &c, 1);
  int status = 0;
  waitpid(pid, &status, 0);
  printf("owner: opener exited %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return again && cudaFree(again) == cudaSuccess ? 0 : 2;
}
