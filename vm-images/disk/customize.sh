#!/bin/bash
# mmdebstrap customize hook of mkdisk.sh: what makes the chroot a bootable
# system for one user on a serial console.
#   customize.sh ROOT USER DIR_OF_GUEST_FILES
set -euo pipefail
root=$1 user=$2 here=$3

echo qcuda > "$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tqcuda\n' > "$root/etc/hosts"
# Root is the whole disk (no partition table): mkdisk.sh labels it.
echo 'LABEL=qcuda-root / ext4 errors=remount-ro 0 1' > "$root/etc/fstab"

# The account: in group qcuda (made by qcuda-dkms), so /dev/qcuda0 (0660,
# group qcuda) is its; sudo for the rest. The serial console needs nothing:
# systemd starts a getty on the console= of the kernel command line.
chroot "$root" useradd -m -s /bin/bash -G qcuda,sudo "$user"
echo "$user:$user" | chroot "$root" chpasswd

# The guest side of `qcuda vm --disk-image`.
install -m 755 "$here/qcuda-vm-run" "$root/usr/local/sbin/qcuda-vm-run"
install -m 644 "$here/qcuda-vm-run.service" "$root/etc/systemd/system/qcuda-vm-run.service"
chroot "$root" systemctl enable qcuda-vm-run.service

# Timers that would start apt or disk scans in the middle of a short run.
chroot "$root" systemctl disable apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer 2>/dev/null || true
# First boot of every run (the image is used read-only through a snapshot):
# no machine-id prompt, a fixed one.
chroot "$root" systemd-machine-id-setup >/dev/null
