#!/usr/bin/env bash
# package — build the Debian package and check what it installs.
#   ./tools/package.sh [-P nocuda] [-k]     (CI: DEB_BUILD_OPTIONS=nocheck -P nocuda)
# 1. copies the checkout's files (tracked + untracked, not ignored) to a
#    scratch directory and runs `dpkg-buildpackage -b -us -uc` there (it writes
#    the .deb into the parent directory, so never in the checkout itself);
# 2. lintian on the .changes: no errors (E:);
# 3. the file list: binary, unit, sysusers, tmpfiles, conffile, model, docs;
# 4. installs it into a scratch root (dpkg --root, maintainer scripts run
#    with DPKG_ROOT): the inferd user, its directories and the enabled unit
#    must appear there, and the conffile must name the packaged model;
# 5. systemd-analyze verify (--root) and security --offline=yes (exposure
#    <= 2.0) on the installed unit.
# The .deb is left in build-deb/. Needs dpkg-dev, debhelper, lintian, systemd.
# -k keeps the scratch directory. Exit 0 when every check passes.
set -uo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
profiles=() keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        -P) profiles=(-P"$2"); shift 2 ;;
        -P*) profiles=("$1"); shift ;;
        -k) keep=1; shift ;;
        *) echo "usage: $0 [-P PROFILES] [-k]" >&2; exit 2 ;;
    esac
done
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }

scratch=$(mktemp -d /tmp/inferd-package.XXXXXX)
[ "$keep" = 1 ] || trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/inferd"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$src" ls-files -z --cached --others --exclude-standard |
        (cd "$src" && xargs -0 tar -cf - --no-recursion --ignore-failed-read -- 2>/dev/null) |
        tar -xf - -C "$scratch/inferd"
else # not a git checkout (a tarball): everything but build output
    tar -C "$src" -cf - --exclude='./build*' --exclude='./obj-*' --exclude=node_modules . |
        tar -xf - -C "$scratch/inferd"
fi || { echo "package: copying the tree failed" >&2; exit 1; }

version=$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version)
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
deb="$scratch/inferd_${version}_${arch}.deb"
echo "package: dpkg-buildpackage -b -us -uc ${profiles[*]} (DEB_BUILD_OPTIONS='${DEB_BUILD_OPTIONS:-}') in $scratch"
if ! (cd "$scratch/inferd" && nice -n 10 dpkg-buildpackage -b -us -uc "${profiles[@]}") \
        > "$scratch/build.log" 2>&1; then
    tail -40 "$scratch/build.log"
    echo "package: dpkg-buildpackage failed (log above)" >&2
    exit 1
fi
[ -f "$deb" ] && ok "built $(basename "$deb")" || { fail "no $deb"; exit 1; }
mkdir -p build-deb && cp "$deb" build-deb/

# 2. lintian: errors fail, warnings are shown
lint=$(lintian --tag-display-limit 0 "$scratch"/inferd_"${version}"_"${arch}".changes 2>&1 |
    grep -v "running with root privileges")
[ -n "$lint" ] && echo "$lint" | sed 's/^/  lintian: /'
if echo "$lint" | grep -q '^E:'; then fail "lintian reports errors"; else ok "lintian: no errors"; fi

# 3. the file list
files=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|')
for f in /usr/sbin/inferd /lib/systemd/system/inferd.service /lib/systemd/system/inferd@.service \
         /usr/lib/sysusers.d/inferd.conf \
         /usr/lib/tmpfiles.d/inferd.conf /etc/inferd/inferd.conf \
         /usr/share/inferd/models/stories260K.gguf /usr/share/doc/inferd/README.md \
         /usr/share/doc/inferd/API-USAGE.md /usr/share/doc/inferd/SCALE-OUT.md \
         /usr/share/doc/inferd/copyright \
         /usr/share/man/man8/inferd.8.gz; do
    echo "$files" | grep -qx "$f" && ok "contains $f" || fail "missing $f"
done
for f in $(echo "$files" | grep -E '^/usr/(local|include)|/vocab/|/reference/|\.a$'); do
    fail "unexpected file $f"
done

# 4. install into a scratch root with dpkg --root: the maintainer scripts run
#    outside it with DPKG_ROOT set (--force-script-chrootless), so what the
#    postinst does on a real install (sysusers, tmpfiles, enable) lands there.
#    --force-depends: the root has no libc6 etc. in its dpkg database.
root="$scratch/root"
ctl="$scratch/control"
mkdir -p "$root/etc" "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$ctl"
touch "$root/var/lib/dpkg/status" "$root/etc/passwd" "$root/etc/group" "$root/etc/shadow" \
    "$root/etc/gshadow"
dpkg-deb -e "$deb" "$ctl" || fail "dpkg-deb -e"
if dpkg --root="$root" --force-script-chrootless --force-depends --log=/dev/null \
        -i "$deb" > "$scratch/install.log" 2>&1; then
    ok "dpkg --root installs it"
else
    fail "dpkg --root -i: $(tail -5 "$scratch/install.log")"
fi
grep -qx /etc/inferd/inferd.conf "$ctl/conffiles" && ok "conffile /etc/inferd/inferd.conf" ||
    fail "inferd.conf is not a conffile"
grep -qx 'model = /usr/share/inferd/models/stories260K.gguf' "$root/etc/inferd/inferd.conf" &&
    ok "inferd.conf serves the packaged model" || fail "inferd.conf does not name the packaged model"
uid=$(awk -F: '$1 == "inferd" { print $3 }' "$root/etc/passwd")
[ -n "$uid" ] && ok "postinst created the user: $(grep '^inferd:' "$root/etc/passwd")" ||
    fail "no inferd user after install (sysusers)"
for d in /var/lib/inferd /var/lib/inferd/models /var/cache/inferd; do
    if [ -d "$root$d" ] && [ "$(stat -c %u "$root$d")" = "$uid" ]; then
        ok "postinst created $d (mode $(stat -c %a "$root$d"), owner inferd)"
    else
        fail "$d missing or not owned by inferd after install (tmpfiles)"
    fi
done
[ -L "$root/etc/systemd/system/multi-user.target.wants/inferd.service" ] &&
    ok "the unit is enabled" || fail "the unit is not enabled after install"
# the packaged binary: its default model is the packaged one, and it serves it
bin="$root/usr/sbin/inferd"
# the help text first, then grep: grep -q stops reading at its match and a
# longer help would die of SIGPIPE, failing the pipeline under pipefail
help_text=$("$bin" serve --help)
grep -q "demo model /usr/share/inferd/models/stories260K.gguf" <<<"$help_text" &&
    ok "default model: /usr/share/inferd/models/stories260K.gguf" ||
    fail "serve --help does not name /usr/share/inferd/models/stories260K.gguf"
"$bin" serve --config "$root/etc/inferd/inferd.conf" --port 0 --prewarm false \
    --model "$root/usr/share/inferd/models/stories260K.gguf" > "$scratch/serve.log" 2>&1 &
spid=$!
for _ in $(seq 1 100); do grep -q ' ready: ' "$scratch/serve.log" && break; sleep 0.1; done
kill -TERM $spid 2>/dev/null; wait $spid; src_rc=$?
grep -q ' ready: ' "$scratch/serve.log" && [ $src_rc = 0 ] &&
    ok "the packaged binary serves the packaged model with the packaged config" ||
    fail "packaged serve (exit $src_rc): $(tail -3 "$scratch/serve.log")"

# 5. the installed unit
unit="$root/lib/systemd/system/inferd.service"
grep -qx 'ExecStart=/usr/sbin/inferd serve --config /etc/inferd/inferd.conf' "$unit" &&
    ok "unit ExecStart uses /usr/sbin and /etc" || fail "unit ExecStart: $(grep ExecStart= "$unit")"
# verify resolves the unit's dependencies (sysinit.target, ...) and its
# commands (/bin/kill) under the root: give it the host's units and kill.
mkdir -p "$root/bin"
cp -n /bin/kill "$root/bin/kill"
cp -an /lib/systemd/system/. "$root/lib/systemd/system/" 2>/dev/null
# both units: the service and the one-per-GPU template (docs/SCALE-OUT.md)
for u in inferd.service inferd@.service; do
    if out=$(systemd-analyze verify --root="$root" "/lib/systemd/system/$u" 2>&1); then
        ok "systemd-analyze verify $u"
    else
        fail "systemd-analyze verify $u: $out"
    fi
    sec=$(systemd-analyze security --offline=yes "$root/lib/systemd/system/$u" 2>&1 |
        grep -o 'Overall exposure level for [^:]*: [0-9.]*')
    level=${sec##* }
    if [ -n "$level" ] && awk -v l="$level" 'BEGIN { exit !(l <= 2.0) }'; then
        ok "systemd-analyze security --offline=yes $u: exposure $level"
    else
        fail "systemd-analyze security $u: exposure '${level:-?}' (want <= 2.0)"
    fi
done

echo "package: $( [ $fails = 0 ] && echo ok || echo "$fails checks failed" ) (build-deb/$(basename "$deb"))"
[ "$fails" = 0 ]
