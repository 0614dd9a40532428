#!/bin/bash
# scripts/v2-guest/run.sh -- run a command as root inside a throw-away QEMU guest whose
# kernel (Debian's linux-image-amd64) uses the unified cgroup v2 hierarchy only.
# Adapted from ../shared/tools/run-in-v2-guest.sh (see ../shared/notes/v2-guest.md for what was
# learned making it work). Everything it needs comes from Debian's own packages, installed or
# downloaded once and idempotently: qemu-system-x86 (from <codename>-backports when the image
# already has backports' qemu-utils), busybox-static (extracted), the kernels (apt-get download,
# unpacked, never installed). scripts/v2-guest/ci.sh is the CI stage built on it.
#
#   usage: scripts/v2-guest/run.sh [--] COMMAND [ARG...]
#
# The guest sees the host's root filesystem read-only over 9p, with a tmpfs overlay
# on top (writes are thrown away), fresh tmpfs on /tmp /run /dev/shm, and the
# host's current directory (V2VM_SHARE) shared read-write at the same path.
# The command runs as root (PID 2, in the root cgroup, cwd = host cwd) with
# stdin=/dev/null; its stdout/stderr (pipes, not ttys) are streamed to this
# script's stdout/stderr; the script exits with the command's exit status.
# 124 = V2VM_TIMEOUT hit, 125 = the guest died without reporting a status.
#
# Environment knobs:
#   V2VM_DIR=/var/tmp/sandbox-v2-guest  cache (kernel, initramfs) and per-run control dirs
#   V2VM_MEM=1024        guest RAM in MiB (allocated lazily by QEMU)
#   V2VM_SMP=2           vCPUs
#   V2VM_ACCEL=tcg       tcg | kvm  (kvm needs real VMX/SVM; see notes)
#   V2VM_TIMEOUT=900     wall-clock limit in seconds for the whole VM
#   V2VM_SHARE=$PWD      host dir shared read-write at the same path ("" = none)
#   V2VM_PASSENV="..."   extra environment variable names to pass in
#   V2VM_APPEND="..."    extra kernel command line
#   V2VM_KERNEL=stable   stable | backports (Debian's linux-image-amd64 from <codename>-backports)
#   V2VM_MACHINE=q35     QEMU machine type (q35 boots ~0.5 s faster than pc here)
#   V2VM_DEBUG=1         show kernel log + init trace on stderr
set -euo pipefail

[ "${1:-}" = "--" ] && shift
if [ $# -eq 0 ]; then echo "usage: $0 [--] COMMAND [ARG...]" >&2; exit 2; fi

D=${V2VM_DIR:-/var/tmp/sandbox-v2-guest}
MEM=${V2VM_MEM:-1024}
SMP=${V2VM_SMP:-2}
ACCEL=${V2VM_ACCEL:-tcg}
TMO=${V2VM_TIMEOUT:-900}
SHARE=${V2VM_SHARE-$PWD}
INITVER=10                      # bump when the init scripts below change
log() { echo "v2vm: $*" >&2; }
mkdir -p "$D"

# ---------------------------------------------------------------- setup (once)
export DEBIAN_FRONTEND=noninteractive
# apt with a private list dir that adds <codename>-backports (system sources untouched)
CODENAME=$(. /etc/os-release; echo "$VERSION_CODENAME")
apt_uri() {  # apt_uri SUITE: the first URI of an enabled apt source that lists SUITE
  local suite=$1 f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v s="$suite" 'BEGIN{RS=""} /(^|\n)Types:[^\n]*deb([ \n]|$)/ {
        u=""; ok=0; n=split($0, L, "\n")
        for (i=1;i<=n;i++) { if (L[i] ~ /^URIs:/) { split(L[i], w, " "); u=w[2] }
                             if (L[i] ~ /^Suites:/) { m=split(L[i], w, " "); for (j=2;j<=m;j++) if (w[j]==s) ok=1 } }
        if (ok && u!="") { print u; exit } }' "$f"
  done | head -1 | grep . && return
  grep -hE '^deb[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk -v s="$suite" '{ for (i=3;i<=NF;i++) if ($i==s) { print $2; exit } }' | head -1
}
bpo_opts() {
  local a="$D/apt"
  BPO=(-o Dir::Etc::sourcelist="$a/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::lists="$a/lists"
       -o Dir::Cache::archives="$a/archives" -o APT::Sandbox::User=root)
  [ -n "$(ls "$a/lists" 2>/dev/null | grep -v partial)" ] && return
  mkdir -p "$a/lists/partial" "$a/archives/partial"
  # The mirrors this machine already uses (deb822 .sources or one-line sources.list): the archive
  # that serves "$CODENAME", and the one that serves "$CODENAME-security".
  local main_uri sec_uri
  main_uri=$(apt_uri "$CODENAME"); sec_uri=$(apt_uri "$CODENAME-security")
  [ -n "$main_uri" ] || { log "no apt source for $CODENAME found under /etc/apt"; exit 1; }
  printf 'deb %s %s main\n' "$main_uri" "$CODENAME" "$main_uri" "$CODENAME-updates" "$main_uri" "$CODENAME-backports" > "$a/sources.list"
  [ -n "$sec_uri" ] && printf 'deb %s %s main\n' "$sec_uri" "$CODENAME-security" >> "$a/sources.list"
  apt-get "${BPO[@]}" update -q >&2
}
bpo_apt() { bpo_opts; apt-get "${BPO[@]}" -t "$CODENAME-backports" install -y -q --no-install-recommends --no-remove "$@" >&2; }
apt_download() {  # apt_download PKG DIR [APT-OPTS...]: fetch one .deb without installing it
  local p=$1 d=$2; shift 2
  (cd "$d" && { apt-get "$@" download -q -o APT::Sandbox::User=root "$p" >&2 ||
                { apt-get "$@" update -q >&2 && apt-get "$@" download -q -o APT::Sandbox::User=root "$p" >&2; }; })
}
setup() {
  if ! command -v qemu-system-x86_64 >/dev/null; then
    log "installing qemu-system-x86"
    # This machine image ships qemu-utils from bookworm-backports (10.0); QEMU 7.2 from
    # bookworm main would make apt REMOVE it, so take qemu-system-x86 from backports too.
    if dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null | grep -q bpo || [ -n "${V2VM_QEMU_BPO:-}" ]; then
      bpo_apt qemu-system-x86
    else
      apt-get install -y -q --no-install-recommends --no-remove qemu-system-x86 >&2 ||
        { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends --no-remove qemu-system-x86 >&2; }
    fi
  fi
  command -v xz >/dev/null || apt-get install -y -q --no-install-recommends xz-utils >&2
  BB="$D/busybox"
  if [ ! -x "$BB" ]; then      # static busybox, extracted (not installed: it conflicts with 'busybox')
    rm -rf "$D/bb.tmp"; mkdir -p "$D/bb.tmp"
    apt_download busybox-static "$D/bb.tmp"
    dpkg-deb -x "$D"/bb.tmp/busybox-static_*.deb "$D/bb.tmp/x"
    local f; for f in "$D"/bb.tmp/x/{usr/,}bin/busybox; do [ -f "$f" ] && cp "$f" "$BB.tmp"; done
    chmod 755 "$BB.tmp"; mv "$BB.tmp" "$BB"; rm -rf "$D/bb.tmp"
  fi
  # V2VM_KERNEL=stable: linux-image-amd64 of the release (6.1 on bookworm);
  # V2VM_KERNEL=backports: the one from <codename>-backports (6.12 on bookworm)
  local flavor=${V2VM_KERNEL:-stable} ao=()
  if [ ! -e "$D/current-kernel-$flavor" ]; then
    local pkg
    if [ "$flavor" = backports ]; then bpo_opts; ao=("${BPO[@]}" -t "$CODENAME-backports"); fi
    pkg=$(apt-cache "${ao[@]}" depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    if [ -z "$pkg" ]; then apt-get "${ao[@]}" update -q >&2
      pkg=$(apt-cache "${ao[@]}" depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}'); fi
    local kv=${pkg#linux-image-}
    log "fetching $pkg"
    rm -rf "$D/dl" "$D/k-$kv.tmp"; mkdir -p "$D/dl" "$D/k-$kv.tmp"
    apt_download "$pkg" "$D/dl" "${ao[@]}"
    dpkg-deb -x "$D"/dl/"$pkg"_*.deb "$D/k-$kv.tmp"
    rm -rf "$D/dl"
    # uncompressed vmlinux: QEMU boots it via the PVH entry point, which skips the
    # real-mode setup and the xz decompression (that alone costs ~5-9 s under TCG)
    local bz="$D/k-$kv.tmp/boot/vmlinuz-$kv" off magic='\xFD7zXZ\x00' unz=(xz -dc --single-stream)
    if grep -q '^CONFIG_KERNEL_ZSTD=y' "$D/k-$kv.tmp/boot/config-$kv"; then
      command -v zstd >/dev/null || apt-get install -y -q --no-install-recommends zstd >&2
      magic='\x28\xB5\x2F\xFD'; unz=(zstd -dcq)
    fi
    off=$( { LC_ALL=C grep -obUaP -m1 "$magic" "$bz" || true; } | LC_ALL=C cut -d: -f1 | sed -n 1p)
    { tail -c +$((${off:-0} + 1)) "$bz" | "${unz[@]}" > "$D/k-$kv.tmp/vmlinux"; } 2>/dev/null || true
    [ "$(head -c4 "$D/k-$kv.tmp/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ] ||
      { log "could not extract vmlinux from $bz"; exit 1; }
    # busybox insmod/modprobe/depmod want plain .ko files (newer Debian kernels ship .ko.xz)
    find "$D/k-$kv.tmp/lib/modules" -name '*.ko.xz' -exec xz -d {} +
    "$BB" depmod -b "$D/k-$kv.tmp" "$kv"          # modules.dep for in-guest modprobe
    rm -rf "$D/k-$kv"; mv "$D/k-$kv.tmp" "$D/k-$kv"
    echo "$kv" > "$D/current-kernel-$flavor"
  fi
  KV=$(cat "$D/current-kernel-$flavor"); K="$D/k-$KV"
  [ -e "$K/initrd-$INITVER.gz" ] || mkinitrd
}

mkinitrd() {
  local t="$K/ird.tmp" m
  rm -rf "$t"; mkdir -p "$t"/{bin,mods,proc,sys,dev,lower,rw,newroot}
  cp "$BB" "$t/bin/busybox"
  mknod -m 600 "$t/dev/console" c 5 1; mknod -m 666 "$t/dev/null" c 1 3
  # load order for what stage 1 needs, from modules.dep (dependencies first; built-ins skipped)
  local md="$K/lib/modules/$KV" order=""
  addmod() {
    local line deps d
    line=$(grep -m1 -E "(^|/)$1\.ko:" "$md/modules.dep") || return 0     # built in
    deps=${line#*:}
    for d in $(echo $deps | tr ' ' '\n' | tac); do addmod "$(basename "$d" .ko)"; done
    case " $order " in *" $1 "*) ;; *) order="$order $1"; cp "$md/${line%%:*}" "$t/mods/$1.ko" ;; esac
  }
  for m in virtio_pci 9pnet_virtio 9p overlay; do addmod $m; done
  echo "$order" > "$t/mods/order"
  # ---- stage 1: PID 1 in the initramfs: mount host root (9p) + tmpfs overlay, switch_root
  cat > "$t/init" <<EOF
#!/bin/busybox sh
export PATH=/bin
/bin/busybox --install -s /bin
busybox mount -t proc proc /proc; busybox mount -t sysfs sys /sys; busybox mount -t devtmpfs dev /dev
grep -q v2vm.debug /proc/cmdline && set -x
for m in \$(cat /mods/order); do insmod /mods/\$m.ko || echo "v2vm: insmod \$m failed" >&2; done
die() { echo "v2vm: \$*" >&2; reboot -f; }
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /lower || die "9p root mount failed"
mount -t tmpfs -o mode=755 tmpfs /rw; mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot || die "overlay failed"
mkdir -p /newroot/lib/modules/$KV
mount --bind /newroot$K/lib/modules/$KV /newroot/lib/modules/$KV
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
mount -t tmpfs -o mode=755 tmpfs /newroot/run
mkdir -p /newroot/run/v2vm
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=none ctl /newroot/run/v2vm || die "ctl mount failed"
if [ -s /newroot/run/v2vm/share ]; then
  s=\$(cat /newroot/run/v2vm/share); mkdir -p "/newroot\$s"
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=mmap share "/newroot\$s" || die "share mount failed"
fi
cp /bin/busybox /init2 /newroot/run/
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /run/busybox sh /run/init2
EOF
  # ---- stage 2: PID 1 in the real root: cgroup2, pseudo-fs, run the command, power off
  cat > "$t/init2" <<'EOF'
B=/run/busybox
$B mount -t proc proc /proc
$B grep -q v2vm.debug /proc/cmdline && set -x
$B mount -t sysfs sys /sys
$B mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
$B mount -t securityfs securityfs /sys/kernel/security 2>/dev/null
$B mkdir -p /dev/pts /dev/shm /dev/mqueue /run/bin
$B mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
$B ln -sf pts/ptmx /dev/ptmx
$B mount -t tmpfs -o mode=1777 tmpfs /dev/shm
$B mount -t mqueue mqueue /dev/mqueue 2>/dev/null
$B ln -s /proc/self/fd /dev/fd; $B ln -s fd/0 /dev/stdin; $B ln -s fd/1 /dev/stdout; $B ln -s fd/2 /dev/stderr
$B ln -s /run/busybox /run/bin/modprobe; echo /run/bin/modprobe > /proc/sys/kernel/modprobe
$B modprobe tun 2>/dev/null
c=""; for x in $($B cat /sys/fs/cgroup/cgroup.controllers); do c="$c +$x"; done
echo "$c" > /sys/fs/cgroup/cgroup.subtree_control
$B hostname v2vm
$B ip link set lo up 2>/dev/null
$B stty -F /dev/ttyS0 raw -echo 2>/dev/null; $B stty -F /dev/ttyS1 raw -echo 2>/dev/null
$B mkfifo /run/o.fifo /run/e.fifo
$B cat /run/o.fifo > /dev/ttyS0 & po=$!
$B cat /run/e.fifo > /dev/ttyS1 & pe=$!
export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
. /run/v2vm/env
cd "$($B cat /run/v2vm/cwd)" 2>/dev/null || cd /
/bin/bash /run/v2vm/cmd </dev/null >/run/o.fifo 2>/run/e.fifo
echo $? > /run/v2vm/rc
# give the output pumps up to ~3 s (background daemons may still hold the fifos)
i=0; while [ $i -lt 30 ] && { $B kill -0 $po || $B kill -0 $pe; } 2>/dev/null; do $B usleep 100000; i=$((i+1)); done
$B sync
$B grep -q v2vm.debug /proc/cmdline || echo 0 > /proc/sys/kernel/printk
$B reboot -f          # QEMU runs with -no-reboot, so a reset ends it (works with acpi=off too)
EOF
  chmod 755 "$t/init"
  (cd "$t" && find . | "$BB" cpio -o -H newc 2>/dev/null | gzip -1 > "$K/initrd.tmp.$$")
  mv "$K/initrd.tmp.$$" "$K/initrd-$INITVER.gz"; rm -rf "$t"
}

# serialize installs between concurrent runs
exec 9>"$D/.lock"; flock 9; setup; flock -u 9

# ---------------------------------------------------------------- per run
R=$(mktemp -d "$D/run.XXXXXX")
QPID=""
cleanup() { [ -n "$QPID" ] && kill "$QPID" 2>/dev/null; [ -n "${EPID:-}" ] && kill "$EPID" 2>/dev/null
            [ -n "${V2VM_KEEP:-}" ] || rm -rf "$R"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

{ printf '%q ' "$@"; echo; } > "$R/cmd"
printf '%s\n' "$PWD" > "$R/cwd"
case "$SHARE" in ""|/|/proc*|/sys*|/dev*) : > "$R/share" ;; *) (cd "$SHARE" && pwd -P) > "$R/share" ;; esac
for v in PATH HOME USER LANG LC_ALL TZ CI RUST_BACKTRACE RUST_LOG ${V2VM_PASSENV:-}; do
  [ -n "${!v+x}" ] && printf 'export %s=%q\n' "$v" "${!v}"
done > "$R/env"
mkfifo "$R/stderr.fifo"
cat "$R/stderr.fifo" >&2 & EPID=$!

if [ "$ACCEL" = kvm ]; then acc=(-accel kvm -cpu host); else acc=(-accel tcg,thread=multi -cpu max); fi
dbg="quiet loglevel=1"; [ -n "${V2VM_DEBUG:-}" ] && dbg="v2vm.debug loglevel=7"
shr=(); [ -s "$R/share" ] && shr=(-virtfs "local,path=$(cat "$R/share"),mount_tag=share,security_model=passthrough")

timeout -k 5 "$TMO" qemu-system-x86_64 -M "${V2VM_MACHINE:-q35}" "${acc[@]}" -smp "$SMP" -m "$MEM" \
  -nodefaults -no-user-config -display none -no-reboot \
  -serial stdio -chardev "file,id=err,path=$R/stderr.fifo" -serial chardev:err \
  -kernel "$K/vmlinux" -initrd "$K/initrd-$INITVER.gz" \
  -append "console=ttyS1 $dbg panic=-1 mitigations=off cryptomgr.notests=1 8250.nr_uarts=2 systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all ${V2VM_APPEND:-}" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$R,mount_tag=ctl,security_model=none" "${shr[@]}" </dev/null &
QPID=$!
set +e; wait $QPID; qrc=$?; set -e; QPID=""
exec 8<>"$R/stderr.fifo"; exec 8>&-     # unblocks the reader if qemu never opened the fifo
wait $EPID 2>/dev/null || true; EPID=""
if [ -s "$R/rc" ]; then exit "$(cat "$R/rc")"; fi
if [ $qrc -eq 124 ]; then log "timeout after ${TMO}s"; exit 124; fi
log "guest ended without an exit status (qemu rc=$qrc); rerun with V2VM_DEBUG=1"; exit 125
