// `qcuda help`: what each command does and its options (docs/operations.md
// lists every option here: test/cli/docs.test.ts checks).
import { GPU_CONTEXT_OVERHEAD } from '../qcuda/quota/limits';
import { MAX_SHARES } from '../vm/shares';

export const HELP = `Usage: qcuda <command> [options]

Commands:
  vm [options] [--] COMMAND...   boot a guest with the qcuda device, run COMMAND
                                 (a shell command line) in it, print its output
                                 and exit with its status
  run [options] [--] PROGRAM [ARGS...]
                                 run PROGRAM on this host, no VM, its CUDA
                                 calls through qcuda's libcuda.so.1 and a qcuda
                                 backend (started for the run, or --socket);
                                 exits with PROGRAM's status
  qemu-args --socket=PATH [--disk-socket=PATH...]
                                 print the QEMU arguments that attach the device
                                 (and GPU disks: qcuda-backend --device=blk
                                 --queues=2 sockets, one per disk)
  status --socket=PATH [--json]  what the backend serving PATH (its --socket-path)
                                 holds: sessions, device memory against the
                                 quota, calls served per queue, guest memory,
                                 uptime (from its status socket, PATH.status;
                                 --status-socket=PATH names that one instead)
  libvirt-xml --name=VM --socket=PATH (--kernel=K [--initrd=I] [--cmdline=C] | --disk=IMAGE)
                                 print a libvirt domain with the qcuda device on
                                 the backend at PATH (guest RAM a shared memfd;
                                 the device through <qemu:commandline>); also
                                 --qemu, --memory, --cpus, --queues, --type=kvm|qemu
  libvirt-xml --windows --name=VM --windows-image=DISK --shm=/dev/shm/NAME
                                 print a libvirt domain for a Windows VM: the
                                 machine of vm --windows-image (its --shm-size,
                                 --dll-dir, --virtio-win, --firmware, --vnc,
                                 --memory, --cpus; also --qemu, --type) with the
                                 region as <shmem name='NAME'>. Start the backend
                                 first, as the user QEMU runs as (libvirt's
                                 system daemon: libvirt-qemu), for it makes the
                                 region, mode 0600, and libvirt only maps it:
                                   qcuda-backend --backend-user=libvirt-qemu
                                     --provider=auto --shm=/dev/shm/NAME
                                     --shm-size=512M
                                 (docs/windows.md: virsh define, start)
  migrate --monitor=PATH --to=URI
                                 move a running VM (qcuda vm --monitor=PATH) to
                                 a QEMU waiting on URI (qcuda vm --incoming=URI,
                                 or any -incoming): stopped, migrated, then
                                 ended here; on failure it runs on here
                                 (docs/migration.md)
  help                           this text

vm options:
  --disk-image=PATH[:rw]
                       boot this disk image instead of the initramfs guest: a
                       partitionless ext4 Debian image with the qcuda packages,
                       as 'make guest-disk' builds it (build/guest-disk/
                       qcuda-debian12.img), with its own kernel and initrd and
                       a full systemd boot; COMMAND runs as the image's user
                       (the first member of group qcuda) in the directory of
                       the --file files. The image is not changed (the run
                       writes to a temporary snapshot) unless :rw
  --console            with --disk-image and no COMMAND: boot to the login
                       prompt on this terminal (the serial console; user
                       guest, password guest in make guest-disk's image);
                       the run ends when the guest powers off (sudo
                       poweroff) or on Ctrl-a x. No timeout unless --timeout
  --file=PATH          copy a host file into the guest's /qcuda/files (on PATH
                       and LD_LIBRARY_PATH there); repeatable. The initramfs
                       guest has the C and C++ runtimes and OpenMP's
                       libgomp.so.1; a program that needs other host
                       libraries runs with --host-root (or --file them)
  --share=HOSTDIR[:GUESTDIR[:rw]]
                       mount a host directory in the guest over virtiofs
                       before COMMAND runs, at GUESTDIR (default: the same
                       path; /host for /). Read-only unless :rw (HOSTDIR:rw
                       keeps the default GUESTDIR); read-only is enforced on
                       the host (a read-only bind mount in virtiofsd's own
                       mount namespace), so guest root cannot write either.
                       Mounts below HOSTDIR come along (nosuid,nodev), kernel
                       filesystems (proc, sys, dev, cgroup...) do not.
                       Repeatable, up to ${MAX_SHARES}; needs root and virtiofsd
  --host-root          run COMMAND on the host's own root filesystem: shares /
                       read-only at /host and runs COMMAND chrooted there
                       (qcuda-chroot: guest /proc, /sys, /dev, a tmpfs /tmp
                       and /run instead of the host's, qcuda's libcuda.so.1 and
                       libcudart.so.13 first on LD_LIBRARY_PATH), in the
                       current directory; e.g. --host-root -- 'python3 x.py'.
                       The host's files are read-only there (EROFS). Open
                       files: 2^20 in the guest; of shared files, about half
                       of virtiofsd's hard limit (raised to fs.nr_open where
                       root may, else the one qcuda vm inherits)
  --host-root-writable --host-root with / writable in the guest: an overlay
                       whose upper layer is a tmpfs in guest RAM (at most
                       half of --memory), so writes anywhere succeed and are
                       discarded when the run ends; the host's files never
                       change. Keep results with --share=DIR:rw
  --disk=SIZE[,store=gpu|host][,ro]
                       attach a disk of SIZE (e.g. 1G) kept in GPU memory
                       (store=gpu: allocated as written, from the VM's
                       --device-memory-limit) or host memory (store=host);
                       default: the GPU if one answers, else host memory
                       (said on stderr). Served by a qcuda-backend --device=blk of its own to
                       QEMU's vhost-user-blk-pci: /dev/vda, then vdb, ...;
                       ro: read-only. Repeatable. --disk=socket=PATH: the disk
                       of a qcuda-backend --device=blk --queues=2 started by
                       hand, which keeps it across runs
  --transport=shm      also give the guest the shared-memory transport a
                       Windows guest uses: a backend of its own makes a
                       region, QEMU maps it as an ivshmem-plain device
                       (PCI 1af4:1110), and COMMAND runs with QCUDA_SHM set
                       to the device's /sys/bus/pci/devices/BDF/resource2,
                       so its first CUDA process goes through the region
                       (the others find it taken; env -u QCUDA_SHM uses the
                       virtio device). Initramfs guest only; removed at exit
                       (docs/windows.md). Default vhost-user: the virtio device
  --shm-size=SIZE      the region's size with --transport=shm: a power of two,
                       at least 128M (default 512M)
  --windows-image=DISK boot a Windows VM from DISK (qcow2 if named .qcow2, else
                       raw; written to) instead of the Linux guest: no
                       COMMAND; the backend makes a shared-memory region
                       (--shm-size) that QEMU maps as an ivshmem-plain
                       device, qcuda's DLLs are on a second, read-only disk
                       (a FAT view of --dll-dir), the display is VNC (--vnc),
                       KVM where the host has it; the run ends when Windows
                       shuts down (docs/windows.md). Takes --memory (default
                       4096), --cpus, --timeout (default none), --qemu,
                       --monitor and the backend's options
  --virtio-win=ISO     with --windows-image: virtio-win's ISO as a CD-ROM
                       (its IVSHMEM driver serves the device in Windows)
  --dll-dir=DIR        with --windows-image: the folder of nvcuda.dll and
                       cudart64_13.dll (default: the build's
                       build/windows/zip/qcuda-windows-x64, make windows-dll
                       windows-zip). QEMU needs vvfat (QEMU's fat: drives)
  --firmware=uefi|bios with --windows-image: UEFI (default; OVMF from the
                       firmware directories, QCUDA_FIRMWARE_DIRS, or the
                       ovmf package's) or BIOS (an MBR-partitioned image)
  --vnc=HOST:N|unix:PATH  with --windows-image: where QEMU's VNC server
                       listens (default 127.0.0.1:0, port 5900); QEMU needs VNC
  --timeout=SECONDS    give up (and clean up) after this long (default 300)
  --queues=N           request queues (default 4)
  --memory=MIB         guest RAM (default 512)
  --cpus=N             guest CPUs (default 2)
  --provider=KIND      cuda, emu or auto (default auto: the GPU if one answers,
                       else emu, a device emulated in host RAM; 'host', emu's
                       old name, works too)
  --gpu=N              which host GPU (default 0); a list (--gpu=0,1): the
                       guest's devices 0, 1, ... are those GPUs in that order
  --host-devices=N     the host-memory device emulates N devices (1 to 16,
                       default: as many as --gpu lists, else 1): the guest
                       sees devices 0..N-1, with peer copies between them
                       (docs/multi-gpu.md)
  --isolation=MODE     process (default: a backend worker process per guest
                       process, so a kernel fault ends only that process's
                       CUDA) or none (see qcuda-backend --help)
  --own-queues=yes|no  a guest process's own queue is served by its worker, no
                       hop through the backend (default yes on a GPU, no on the
                       host-memory device; qcuda-backend --help)
  --ring-server=yes|no  the short calls of such a queue answered in C by its
                       worker (default yes; on the GPU; qcuda-backend --help)
  --pin-guest-ram=yes|no  all guest RAM registered for the GPU: pageable
                       copies at pinned speed, but guest kernels can reach
                       all guest RAM (default no; qcuda-backend --help)
  --real-gpu-identity  the guest sees the host GPU's real UUID and PCI
                       location (default: a UUID of the VM's own and a
                       neutral PCI location; qcuda-backend --help)
  --worker-sandbox=seccomp|none
                       each backend worker process, once its CUDA context
                       is made, takes no new privileges and a system call
                       filter (exec, ptrace, mount, namespaces, id changes
                       and the like fail with EPERM) before it serves the
                       guest (default seccomp; qcuda-backend --help)
  --backend-user=USER  run as root, start the backends (and so their GPU
                       workers) as USER instead of root (default: a uid and
                       gid of the VM's own, from 0x7a000000, leased under
                       /run/qcuda-vm-uids while it runs; else qcuda where
                       that user exists, else nobody; root: keep root).
                       Their sockets go in a directory of USER's own under
                       /run, and they serve only QEMU (--peer-uid). Where
                       the default user cannot run the backend (the code
                       not readable by it), it stays root, with a note
  --device-memory-limit=SIZE  the VM's device memory quota (e.g. 2G), one
                       budget for its CUDA processes (each context counts
                       --context-overhead) and its GPU disks (--disk,
                       store=gpu), which take it as they are written (a write
                       past it fails with an I/O error in the guest)
  --context-overhead=SIZE  what each CUDA process's context counts against
                       the quota while it exists (default ${GPU_CONTEXT_OVERHEAD >> 20n}M on a GPU, 0
                       on the host-memory device; qcuda-backend --help)
  --gpu-share=WEIGHT   the VM's share of the GPU's compute time against the
                       other VMs (qcuda vm, qcuda run) started with it: 1 to
                       1000, the same for every guest process count (default:
                       no share kept; qcuda-backend --help)
  --gpu-share-mps=PIPE_DIR  the VM's CUDA processes are clients of the MPS
                       control daemon of PIPE_DIR (started by you:
                       CUDA_MPS_PIPE_DIRECTORY=PIPE_DIR nvidia-cuda-mps-control
                       -d), each capped to the VM's weight's part of the GPU's
                       threads (weight 1 without --gpu-share; qcuda-backend
                       --help). Opt-in: one MPS server serves every VM
  --demo               run the guest test programs built into the image (the
                       transport, then CUDA programs, each printing PASS: built
                       with -cudart=shared over qcuda's libcudart.so.13, and
                       with nvcc's defaults (NAME_static) over its libcuda.so.1);
                       with --disk-image, the same programs from GUEST_BIN
                       (build/guest/bin) as --file, over the image's packages
  --quiet              do not stream the guest console to stderr
  --host-memory-max=SIZE  host memory the VM's backends and their workers
                       may use together (default 32G; none: no bound): they
                       run in a control group of the VM's own (cgroup v2,
                       else v1; where none can be made, a line says so and
                       no bound applies)
  --host-tasks-max=N   their processes and threads together (default 8192;
                       none: no bound)
  --host-cpu-quota=PERCENT  their CPU time together, in percent of one CPU
                       (400: four CPUs; default none)
  --backend-log=FILE   write the backend's log (sessions opened and closed,
                       workers started and ended, warnings) to FILE as it
                       comes, each line after the milliseconds since its
                       first one
  --save=FILE          on SIGUSR2, save the VM into FILE (guest RAM, devices
                       and the qcuda device's state; the guest pauses for the
                       copy, then goes on); again on the next signal
  --restore=FILE       start from a VM --save wrote instead of booting (the
                       same --memory, --cpus and --queues; COMMAND optional)
  --incoming=URI       wait for a VM migrated to URI (unix:PATH, tcp:HOST:PORT,
                       exec:CMD) by qcuda migrate or QEMU's migrate, then run it
  --monitor=PATH       QEMU's QMP socket for qcuda migrate (default: in the
                       run's temporary directory)
run options (and --provider, --gpu, --host-devices, --isolation, --own-queues, --ring-server,
--pin-guest-ram (default yes here: the memory is PROGRAM's own), --worker-sandbox, --real-gpu-identity
(always here: PROGRAM sees NVIDIA's NVML beside it), --device-memory-limit, --context-overhead,
--gpu-share, --gpu-share-mps, --host-memory-max, --host-tasks-max, --host-cpu-quota (here no bound
unless one of the three is given: PROGRAM is your own process), --backend-log and
--backend-user as for vm: run as root, the backend runs as
--backend-user, its socket in a directory of that user's own; the quota holds across all of PROGRAM's
processes):
  --socket=PATH        join the backend listening on PATH (a qcuda-backend
                       --frontends=N) instead of starting one
  --transport=KIND     vhost-user (default): each CUDA process is a frontend of
                       the backend's socket; shm: PROGRAM's first CUDA
                       process reaches it through a shared-memory region
                       (QCUDA_SHM), as a Windows guest does, and its other
                       processes find the region taken (docs/windows.md)
  --cudart=KIND        native (default): only qcuda's libcuda.so.1 goes first
                       on LD_LIBRARY_PATH, programs keep their own CUDA runtime
                       (PyTorch, cuBLAS: one session per process); qcuda: its
                       libcudart.so.13 too (-cudart=shared programs without
                       NVIDIA's runtime; never with NVIDIA's libraries)
  --max-processes=N    CUDA processes at once (default 64)
  --lib-dir=DIR        where qcuda's libcuda.so.1 and libcudart.so.13 are
                       (QCUDA_LIB_DIR, else the build's build/guest/lib)
  What it protects: PROGRAM sees only what its processes allocated; each
  process's CUDA runs in a worker of its own (--isolation=process), bounded
  by the quota and the backend's limits, and bad requests get errors. It does
  not sandbox PROGRAM itself: it runs as you, with your files.
Common options (defaults from the environment, else from the build):
  --qemu=PATH          QEMU binary (QEMU_BIN)
  --kernel=PATH        guest kernel (GUEST_KERNEL)
  --initrd=PATH        guest base initramfs (GUEST_INITRD)
                       Without the option or the variable: the QEMU, kernel
                       and initramfs the build made, as make vm, make run and
                       make install record them in the checkout's
                       build/qcuda-paths.json; so the installed qcuda ('make
                       install': a launcher in PREFIX/bin, PREFIX /usr/local
                       for root, else ~/.local; make run installs it too)
                       runs with no environment (QCUDA_BUILD_PATHS names
                       another such file)
  --virtiofsd=PATH     virtiofsd for --share (QCUDA_VIRTIOFSD, else
                       build/vm/virtiofsd: 'make virtiofsd' puts it there)

Exit status of 'vm': the guest command's status; 125 when the VM failed (the
message names the side that failed: backend, qemu, virtiofsd, guest or
timeout); 2 for bad usage (a share that is not a directory, ...). Every
command refuses a bad argument (a missing file, a bad number or value, an
option of another command) with one line on stderr and status 2, before it
starts anything. A backend slow to start (a loaded host) is waited for while
it runs, up to 120 s plus 5 s per unit of load per CPU; after 3 s qcuda says
what it waits for.`;
