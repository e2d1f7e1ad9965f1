// The GPU worker's sandbox (security review 2, H1): no new privileges, and a
// seccomp filter that refuses the system calls a worker never needs, for
// every thread of the process. A worker feeds guest-chosen images to
// NVIDIA's loader and JIT; if one of them holds a code-execution bug, the
// attacker gets a process that cannot exec, trace, mount, enter or make
// namespaces, load modules or eBPF, or change its ids.
//
// A deny-list, not an allow-list: the CUDA driver's system calls are many,
// undocumented and change with its version (ioctls on its device nodes,
// mmap flavours, threads, eventfds, memfds, futexes, sched_*). An allow-list
// that missed one would kill a worker in the middle of a guest's call: a
// denial of service against the guest on the next driver update. Refused
// calls return EPERM rather than killing, for the same reason: a driver that
// probes for something gets an error and carries on.
#include "sandbox.h"

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "vhost-user/native/errors.h"

namespace qcuda {
namespace {

using vhost_user::ThrowErrno;
using vhost_user::ThrowRange;

// x32 system calls are x86-64 ones with this bit: the same calls under other
// numbers, which a deny-list by number would miss.
constexpr uint32_t kX32Bit = 0x40000000;

// clone's flags that make namespaces (clone's low byte is the exit signal, so CLONE_NEWTIME is no flag there).
constexpr uint32_t kCloneNamespaces =
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET;

// What a worker never does: run programs, reach other processes, change the
// system (mounts, modules, kexec, swap, reboot, accounting, quotas), open
// files by handle, use the kernel's attack surface of choice (eBPF, keyrings,
// perf, userfaultfd, personality, port I/O) or change its ids.
const int kDenied[] = {
    __NR_execve,
    __NR_execveat,
    __NR_ptrace,
    __NR_process_vm_readv,
    __NR_process_vm_writev,
    __NR_mount,
    __NR_umount2,
    __NR_pivot_root,
    __NR_chroot,
    __NR_setns,
    __NR_unshare,
#ifdef __NR_open_tree
    __NR_open_tree,
    __NR_move_mount,
    __NR_fsopen,
    __NR_fsconfig,
    __NR_fsmount,
    __NR_fspick,
#endif
#ifdef __NR_mount_setattr
    __NR_mount_setattr,
#endif
    __NR_bpf,
    __NR_keyctl,
    __NR_add_key,
    __NR_request_key,
    __NR_init_module,
    __NR_finit_module,
    __NR_delete_module,
    __NR_kexec_load,
    __NR_kexec_file_load,
    __NR_reboot,
    __NR_swapon,
    __NR_swapoff,
    __NR_acct,
    __NR_quotactl,
#ifdef __NR_quotactl_fd
    __NR_quotactl_fd,
#endif
    __NR_perf_event_open,
    __NR_userfaultfd,
    __NR_personality,
    __NR_open_by_handle_at,
    __NR_name_to_handle_at,
    __NR_iopl,
    __NR_ioperm,
    __NR_setuid,
    __NR_setgid,
    __NR_setreuid,
    __NR_setregid,
    __NR_setresuid,
    __NR_setresgid,
    __NR_setfsuid,
    __NR_setfsgid,
    __NR_setgroups,
// Other processes of the same user (security review 3, N1): io_uring
// (its own attack surface, and system calls the filter cannot see),
// process_madvise, kcmp and the pidfd calls that reach another process
// (pidfd_getfd copies its fds out: another VM's guest RAM). Signals are
// below: only to itself.
#ifdef __NR_io_uring_setup
    __NR_io_uring_setup,
    __NR_io_uring_enter,
    __NR_io_uring_register,
#endif
#ifdef __NR_process_madvise
    __NR_process_madvise,
#endif
#ifdef __NR_process_mrelease
    __NR_process_mrelease,
#endif
    __NR_kcmp,
#ifdef __NR_pidfd_open
    __NR_pidfd_open,
    __NR_pidfd_send_signal,
#endif
#ifdef __NR_pidfd_getfd
    __NR_pidfd_getfd,
#endif
};

// The low 32 bits of system call argument i (pid_t, int and ioctl's unsigned int command are 32-bit; x86-64 is
// little-endian).
constexpr uint32_t ArgLow(int i) { return static_cast<uint32_t>(offsetof(seccomp_data, args) + 8 * i); }

// Calls that send a signal: the argument that names the process and the one that holds the signal.
struct SignalCall {
  int nr;
  int pidArg;
  int sigArg;
};
const SignalCall kSignalCalls[] = {
    {__NR_kill, 0, 1},
    {__NR_tkill, 0, 1},
    {__NR_tgkill, 0, 2},
    {__NR_rt_sigqueueinfo, 0, 1},
    {__NR_rt_tgsigqueueinfo, 0, 2},
};

sock_filter Stmt(uint16_t code, uint32_t k) { return BPF_STMT(code, k); }
sock_filter Jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { return BPF_JUMP(code, k, jt, jf); }

std::vector<sock_filter> Program() {
  const uint32_t eperm = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
  std::vector<sock_filter> p;
  // Another architecture's calls (int 0x80 from a 64-bit process) have other numbers: end the process.
  p.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
  p.push_back(Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  p.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
  p.push_back(Jump(BPF_JMP | BPF_JGE | BPF_K, kX32Bit, 0, 1));
  p.push_back(Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  for (int nr : kDenied) {
    p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1));
    p.push_back(Stmt(BPF_RET | BPF_K, eperm));
  }
  // Signals only to itself (its own pid, as the process or its thread group), or signal 0 (does it exist?) to any:
  // a worker cannot kill another VM's backend or worker (security review 3, N1).
  const uint32_t self = static_cast<uint32_t>(getpid());
  for (const SignalCall &c : kSignalCalls) {
    p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(c.nr), 0, 6));
    p.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, ArgLow(c.sigArg)));
    p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, 0, 3, 0));
    p.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, ArgLow(c.pidArg)));
    p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, self, 1, 0));
    p.push_back(Stmt(BPF_RET | BPF_K, eperm));
    p.push_back(Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  }
  // A terminal's input is not the worker's to write (security review 3, N2): TIOCSTI pushes bytes into it, which
  // the shell of whoever started the backend would run; TIOCLINUX's selection paste does the same on a console.
  p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 5));
  p.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, ArgLow(1)));
  p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, TIOCSTI, 2, 0));
  p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, TIOCLINUX, 1, 0));
  p.push_back(Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  p.push_back(Stmt(BPF_RET | BPF_K, eperm));
  // clone3's flags are in memory the filter cannot read: ENOSYS, so that libc falls back to clone.
  p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1));
  p.push_back(Stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)));
  // clone (flags in argument 0, its low half): threads and fork yes, new namespaces no.
  p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 3));
  p.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args)));
  p.push_back(Jump(BPF_JMP | BPF_JSET | BPF_K, kCloneNamespaces, 0, 1));
  p.push_back(Stmt(BPF_RET | BPF_K, eperm));
  p.push_back(Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  return p;
}

// sandboxWorker(): for the whole process, now and for good. Throws where the
// kernel refuses (a worker must not serve a guest unsandboxed by surprise).
Napi::Value SandboxWorker(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) ThrowErrno(env, "prctl(PR_SET_DUMPABLE)", errno);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ThrowErrno(env, "prctl(PR_SET_NO_NEW_PRIVS)", errno);
  std::vector<sock_filter> p = Program();
  sock_fprog prog{static_cast<unsigned short>(p.size()), p.data()};
  // TSYNC: node's, libuv's and the driver's threads exist already; each gets the filter (and no_new_privs).
  long r = syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
  if (r < 0) ThrowErrno(env, "seccomp(SECCOMP_SET_MODE_FILTER)", errno);
  if (r > 0) ThrowRange(env, "seccomp: thread " + std::to_string(r) + " could not take the filter");
  return env.Undefined();
}

// undumpable(): PR_SET_DUMPABLE 0 for this process (security review 3, N1).
// Another process of the same user, without CAP_SYS_PTRACE, can then no
// longer open its /proc/PID/mem (nor maps, environ, fd), take its fds with
// pidfd_getfd or trace it: the kernel asks ptrace's access check, which
// refuses a non-dumpable process to all but root. Its /proc/PID files become
// root's; stat, status and cmdline stay readable. Kept until the next exec
// or change of ids (which reset it), so called after them.
Napi::Value Undumpable(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) ThrowErrno(env, "prctl(PR_SET_DUMPABLE)", errno);
  return env.Undefined();
}

// dieWithParent(signal, parentPid): the kernel sends this process signal
// when its parent (the thread that forked it) ends (PR_SET_PDEATHSIG), also
// where it is killed and no cleanup of its own runs. Returns whether the
// parent is still parentPid: false if it ended before the call (the caller
// then ends itself). Cleared by a change of ids: called after it.
Napi::Value DieWithParent(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  int sig = info[0].As<Napi::Number>().Int32Value();
  int parent = info[1].As<Napi::Number>().Int32Value();
  if (prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0) ThrowErrno(env, "prctl(PR_SET_PDEATHSIG)", errno);
  return Napi::Boolean::New(env, getppid() == parent);
}

}  // namespace

void InitSandbox(Napi::Env env, Napi::Object exports) {
  exports.Set("sandboxWorker", Napi::Function::New(env, SandboxWorker));
  exports.Set("undumpable", Napi::Function::New(env, Undumpable));
  exports.Set("dieWithParent", Napi::Function::New(env, DieWithParent));
}

}  // namespace qcuda
