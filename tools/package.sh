#!/usr/bin/env bash
# package — build the Debian package and check what it installs.
#   ./tools/package.sh [-P nocuda] [-k]     (CI: DEB_BUILD_OPTIONS=nocheck -P nocuda)
# 1. copies the checkout's files (tracked + untracked, not ignored) to a
#    scratch directory and runs `dpkg-buildpackage -b -us -uc` there (it writes
#    the .deb into the parent directory, so never in the checkout itself);
# 2. lintian on the .changes: no errors (E:);
# 3. the file list: binary, unit, sysusers, tmpfiles, conffile, model, docs;
# 4. unpacks it into a scratch root (dpkg-deb -x), applies its sysusers and
#    tmpfiles entries there (--root), checks the maintainer scripts apply them
#    on a real install, and that the installed inferd.conf names the packaged
#    model;
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
git -C "$src" ls-files -z --cached --others --exclude-standard |
    (cd "$src" && xargs -0 tar -cf - --no-recursion -- 2>/dev/null) |
    tar -xf - -C "$scratch/inferd" || { echo "package: copying the tree failed" >&2; exit 1; }

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
lint=$(lintian --no-tag-display-limit "$scratch"/inferd_"${version}"_"${arch}".changes 2>&1)
[ -n "$lint" ] && echo "$lint" | sed 's/^/  lintian: /'
if echo "$lint" | grep -q '^E:'; then fail "lintian reports errors"; else ok "lintian: no errors"; fi

# 3. the file list
files=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|')
for f in /usr/sbin/inferd /lib/systemd/system/inferd.service /usr/lib/sysusers.d/inferd.conf \
         /usr/lib/tmpfiles.d/inferd.conf /etc/inferd/inferd.conf \
         /usr/share/inferd/models/stories260K.gguf /usr/share/doc/inferd/README.md \
         /usr/share/doc/inferd/API-USAGE.md /usr/share/doc/inferd/copyright; do
    echo "$files" | grep -qx "$f" && ok "contains $f" || fail "missing $f"
done
for f in $(echo "$files" | grep -E '^/usr/(local|include)|/vocab/|/reference/|\.a$'); do
    fail "unexpected file $f"
done

# 4. unpack into a scratch root, apply sysusers and tmpfiles there
root="$scratch/root"
ctl="$scratch/control"
mkdir -p "$root/etc" "$ctl"
dpkg-deb -x "$deb" "$root" && dpkg-deb -e "$deb" "$ctl" || fail "unpack"
grep -qx /etc/inferd/inferd.conf "$ctl/conffiles" && ok "conffile /etc/inferd/inferd.conf" ||
    fail "inferd.conf is not a conffile"
grep -q 'systemd-sysusers' "$ctl/postinst" && ok "postinst applies sysusers" ||
    fail "postinst does not run systemd-sysusers"
grep -q 'systemd-tmpfiles' "$ctl/postinst" && ok "postinst applies tmpfiles" ||
    fail "postinst does not run systemd-tmpfiles"
grep -qx 'model = /usr/share/inferd/models/stories260K.gguf' "$root/etc/inferd/inferd.conf" &&
    ok "inferd.conf serves the packaged model" || fail "inferd.conf does not name the packaged model"
touch "$root/etc/passwd" "$root/etc/group" "$root/etc/shadow" "$root/etc/gshadow"
if systemd-sysusers --root="$root" >/dev/null 2>&1 && grep -q '^inferd:' "$root/etc/passwd"; then
    ok "sysusers: user $(grep '^inferd:' "$root/etc/passwd")"
else
    fail "systemd-sysusers --root did not create the user"
fi
if systemd-tmpfiles --create --root="$root" "$root/usr/lib/tmpfiles.d/inferd.conf" >/dev/null 2>&1 &&
    [ -d "$root/var/lib/inferd/models" ] && [ -d "$root/var/cache/inferd" ]; then
    ok "tmpfiles: /var/lib/inferd/models $(stat -c '%a %U' "$root/var/lib/inferd/models" 2>/dev/null)"
else
    fail "systemd-tmpfiles --root did not create the directories"
fi
"$root/usr/sbin/inferd" --version >/dev/null && ok "the packaged binary runs" ||
    fail "/usr/sbin/inferd --version"

# 5. the installed unit
unit="$root/lib/systemd/system/inferd.service"
grep -qx 'ExecStart=/usr/sbin/inferd serve --config /etc/inferd/inferd.conf' "$unit" &&
    ok "unit ExecStart uses /usr/sbin and /etc" || fail "unit ExecStart: $(grep ExecStart= "$unit")"
if out=$(systemd-analyze verify --root="$root" /lib/systemd/system/inferd.service 2>&1); then
    ok "systemd-analyze verify"
else
    fail "systemd-analyze verify: $out"
fi
sec=$(systemd-analyze security --offline=yes "$unit" 2>&1 | grep -o 'Overall exposure level for [^:]*: [0-9.]*')
level=${sec##* }
if [ -n "$level" ] && awk -v l="$level" 'BEGIN { exit !(l <= 2.0) }'; then
    ok "systemd-analyze security --offline=yes: exposure $level"
else
    fail "systemd-analyze security: exposure '${level:-?}' (want <= 2.0)"
fi

echo "package: $( [ $fails = 0 ] && echo ok || echo "$fails checks failed" ) (build-deb/$(basename "$deb"))"
[ "$fails" = 0 ]
