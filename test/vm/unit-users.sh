#!/bin/bash
# Guest side of test/vm/disk-unit.test.ts, as root in make guest-disk's
# image booted with systemd: installs packaging/systemd/qcuda-backend@.service
# (its ExecStart the tree's backend, from the tarball $1 that
# test/vm/disk-unit.test.ts packs, on the node copied in with --file), starts two instances, vm1 and vm2, and says
# what each runs as and what each may reach of the other's, one KEY=VALUE a
# line; then stops them and says what is left; then the same two under the
# drop-in that makes them one user (docs/operations.md, MPS).
set -u
TREE=/opt/qcuda
NODE=$PWD/node
mkdir -p $TREE && tar -xzf "$1" -C $TREE
# The groups the unit names: a libvirt host has them (libvirt's packages, udev).
groupadd -f --system libvirt-qemu
groupadd -f --system render
install -m 0755 "$NODE" /usr/local/bin/node
printf '#!/bin/sh\nexec /usr/local/bin/node %s/dist/backend/src/cli/backend.js "$@"\n' "$TREE" > /usr/local/bin/qcuda-backend
chmod 0755 /usr/local/bin/qcuda-backend
install -m 0644 "$TREE/packaging/systemd/qcuda-backend@.service" /etc/systemd/system/
mkdir -p /etc/qcuda
echo 'QCUDA_BACKEND_OPTS="--provider=emu --gpu-share=1"' > /etc/qcuda/vm1.conf
echo 'QCUDA_BACKEND_OPTS="--provider=emu --gpu-share=3"' > /etc/qcuda/vm2.conf
systemctl daemon-reload
start() {
	systemctl start qcuda-backend@vm1 qcuda-backend@vm2
	for vm in vm1 vm2; do
		for _ in $(seq 600); do [ -S /run/qcuda/$vm/qcuda.sock.status ] && break; sleep 0.1; done
	done
}
# The GPU share table each joined (the backend's line): "slot N of PATH".
table() { journalctl -u qcuda-backend@$1 _SYSTEMD_INVOCATION_ID="$(systemctl show -p InvocationID --value qcuda-backend@$1)" -o cat | sed -n 's/.*GPU share: weight [0-9]*, \(slot .*\)/\1/p' | tail -1; }
start
echo "active=$(systemctl is-active qcuda-backend@vm1) $(systemctl is-active qcuda-backend@vm2)"
# What went wrong, where it did (on stderr: the test shows it on failure).
for vm in vm1 vm2; do
	systemctl is-active -q qcuda-backend@$vm || journalctl -u qcuda-backend@$vm --no-pager -n 30 >&2
done
uid_of() { ps -o uid= -p "$(systemctl show -p MainPID --value qcuda-backend@$1)" | tr -d ' '; }
gid_of() { ps -o gid= -p "$(systemctl show -p MainPID --value qcuda-backend@$1)" | tr -d ' '; }
u1=$(uid_of vm1) g1=$(gid_of vm1) u2=$(uid_of vm2)
echo "uids=$u1 $u2"
echo "groups1=$(tr '\0' '\n' < /proc/"$(systemctl show -p MainPID --value qcuda-backend@vm1)"/status | sed -n 's/^Groups:\t*//p' | xargs -n1 getent group | cut -d: -f1 | sort | xargs)"
for vm in vm1 vm2; do
	# Owners by number: the image resolves no dynamic user's name (no nss-systemd).
	echo "dir_$vm=$(stat -c '%u %G %a' /run/qcuda/$vm)"
	echo "sock_$vm=$(stat -c '%u %G %a' /run/qcuda/$vm/qcuda.sock)"
	echo "link_$vm=$(readlink /run/qcuda/$vm.sock)"
	echo "cache_$vm=$(stat -L -c '%u %a' /var/cache/qcuda/$vm)"
done
# As vm1's user (its groups too): vm2's directories and socket.
as1() { setpriv --reuid="$u1" --regid="$g1" --groups="$(getent group video | cut -d: -f3),$(getent group render | cut -d: -f3)" "$@"; }
connect='require("net").connect(process.argv[1]).on("connect",()=>{console.log("connected");process.exit(0)}).on("error",(e)=>{console.log(e.code);process.exit(0)})'
echo "vm1_ls_vm2=$(as1 ls /run/qcuda/vm2 2>&1 >/dev/null | grep -o 'Permission denied' | head -1)"
echo "vm1_cache_vm2=$(as1 ls /var/cache/qcuda/vm2/ 2>&1 >/dev/null | grep -o 'Permission denied' | head -1)"
echo "vm1_connect_vm2=$(as1 /usr/local/bin/node -e "$connect" /run/qcuda/vm2.sock)"
echo "vm1_connect_vm1=$(as1 /usr/local/bin/node -e "$connect" /run/qcuda/vm1.sock)"
# QEMU under libvirt: a user of group libvirt-qemu, through the link.
useradd --system --no-create-home --gid libvirt-qemu qemutest
echo "qemu_connect_vm2=$(setpriv --reuid=qemutest --regid=libvirt-qemu --init-groups /usr/local/bin/node -e "$connect" /run/qcuda/vm2.sock)"
# A crash (Restart=on-failure): the stop commands run, then the start's again; the socket is back, the VM's.
pid1=$(systemctl show -p MainPID --value qcuda-backend@vm1)
systemctl kill -s KILL qcuda-backend@vm1
for _ in $(seq 300); do
	p=$(systemctl show -p MainPID --value qcuda-backend@vm1)
	[ "$p" != 0 ] && [ "$p" != "$pid1" ] && [ -S /run/qcuda/vm1/qcuda.sock.status ] && break
	sleep 0.1
done
echo "restarted=$(systemctl is-active qcuda-backend@vm1) $(systemctl show -p NRestarts --value qcuda-backend@vm1)"
echo "restarted_sock=$(stat -c '%u %G %a' /run/qcuda/vm1/qcuda.sock) $(uid_of vm1)"
echo "restarted_qemu=$(setpriv --reuid=qemutest --regid=libvirt-qemu --init-groups /usr/local/bin/node -e "$connect" /run/qcuda/vm1.sock)"
echo "table_vm1=$(table vm1)"
echo "table_vm2=$(table vm2)"
systemctl stop qcuda-backend@vm1 qcuda-backend@vm2
echo "stopped=$(systemctl show -p Result --value qcuda-backend@vm1) $(systemctl show -p Result --value qcuda-backend@vm2)"
echo "after_stop=$(ls -A /run/qcuda | xargs)"
echo "left_vm1=$(stat -c '%U %G %a' /run/qcuda/vm1) $(ls -A /run/qcuda/vm1 | wc -l)"

# The drop-in of docs/operations.md ("GPU sharing with MPS"): the VMs one user
# again, qcuda, so that their share table (and an MPS server) is one.
useradd --system --no-create-home --shell /usr/sbin/nologin -g qcuda --groups video,render qcuda
mkdir -p /etc/systemd/system/qcuda-backend@.service.d
printf '[Service]\nDynamicUser=no\nUser=qcuda\nRemoveIPC=no\n' > /etc/systemd/system/qcuda-backend@.service.d/one-user.conf
systemctl daemon-reload
start
echo "one_active=$(systemctl is-active qcuda-backend@vm1) $(systemctl is-active qcuda-backend@vm2)"
echo "one_uids=$(uid_of vm1) $(uid_of vm2) $(id -u qcuda)"
echo "one_dir_vm1=$(stat -c '%U %G %a' /run/qcuda/vm1)"
echo "one_table_vm1=$(table vm1)"
echo "one_table_vm2=$(table vm2)"
echo "one_qemu_connect_vm1=$(setpriv --reuid=qemutest --regid=libvirt-qemu --init-groups /usr/local/bin/node -e "$connect" /run/qcuda/vm1.sock)"
systemctl stop qcuda-backend@vm1 qcuda-backend@vm2
echo "one_stopped=$(systemctl show -p Result --value qcuda-backend@vm1) $(systemctl show -p Result --value qcuda-backend@vm2)"
