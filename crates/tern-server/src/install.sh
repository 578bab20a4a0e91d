#!/bin/sh
# Tern's one-line installer, served by ternd at GET /install.sh:
#
#   curl -fsSL https://ternd.example:3025/install.sh | sh -s -- --group prod --join-token-file /root/join.token
#   curl -fsSL https://ternd.example:3025/install.sh | sh -s -- --channel stable --group prod --join-token-file /root/join.token
#
# It downloads tern-update for this machine's architecture from the same ternd,
# checks its size and SHA-256 against the values ternd wrote into this script, installs
# it, pins ternd's CA when given one, and enrolls the host (`tern-update enable`, then
# `tern-update setup` for its systemd timer). See docs/install.md.
#
# ternd fills in the two values below when it serves the script.
set -eu

server='@TERN_SERVER@'

# arch size sha256, one line per tern-update binary ternd serves.
checksums() {
    cat <<'EOF'
@TERN_CHECKSUMS@
EOF
}

usage() {
    cat <<'EOF'
usage: sh install.sh [--group NAME] [--channel NAME|URL]
                     (--join-token TOKEN | --join-token-file FILE)
                     [--ca-cert FILE] [--server URL] [--base-url URL] [--prefix DIR]
                     [--root DIR] [--service-config FILE] [--insecure] [--no-setup]

  --group NAME           the rollout group of this host (letters, digits, . _ -)
  --channel NAME|URL     follow a channel instead of the rollout: a channel of this
                         ternd (`ternctl channels set NAME VERSION`), or the base URL
                         of any channel; the host updates in --group's window
  --join-token TOKEN     a join token (`ternctl tokens create --role join`); prefer
                         --join-token-file or TERN_JOIN_TOKEN: a command line is
                         visible to every user of this machine
  --join-token-file FILE read the join token from FILE
  --ca-cert FILE         ternd's CA (PEM): every download and tern-update trust only it
  --server URL           ternd's address (default: the one that served this script)
  --base-url URL         where the agent's release tarballs are (default: --server)
  --prefix DIR           where tern-update goes: DIR/bin (default /usr/local)
  --root DIR             install everything under DIR instead of / (images, tests);
                         also TERN_INSTALL_ROOT
  --service-config FILE  passed to `tern-update enable`
  --insecure             allow plain http and any certificate (labs only)
  --no-setup             enroll only; do not write the systemd timer
EOF
}

die() {
    printf 'tern install: error: %s\n' "$*" >&2
    exit 1
}

say() {
    printf 'tern install: %s\n' "$*" >&2
}

group=''
channel=''
base_url=''
token="${TERN_JOIN_TOKEN:-}"
token_file=''
ca_cert=''
prefix='/usr/local'
root="${TERN_INSTALL_ROOT:-}"
service_config=''
insecure=''
setup='yes'

# The value of option "$1", given as "$2".
value() {
    [ "$#" -ge 2 ] || die "$1 needs a value"
    case "$2" in
    --*) die "$1 needs a value (got the option $2)" ;;
    esac
}

while [ "$#" -gt 0 ]; do
    case "$1" in
    --group) value "$@"; group=$2; shift 2 ;;
    --channel) value "$@"; channel=$2; shift 2 ;;
    --base-url) value "$@"; base_url=$2; shift 2 ;;
    --join-token) value "$@"; token=$2; shift 2 ;;
    --join-token-file) value "$@"; token_file=$2; shift 2 ;;
    --ca-cert) value "$@"; ca_cert=$2; shift 2 ;;
    --server) value "$@"; server=$2; shift 2 ;;
    --prefix) value "$@"; prefix=$2; shift 2 ;;
    --root) value "$@"; root=$2; shift 2 ;;
    --service-config) value "$@"; service_config=$2; shift 2 ;;
    --insecure) insecure='yes'; shift ;;
    --no-setup) setup=''; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done

# Inputs are checked before anything is downloaded or written.
nl='
'
case "$group" in
*[!A-Za-z0-9._-]*)
    die "--group '$group' is not a group name: use 1-64 letters, digits, '.', '_' or '-' (no spaces or shell characters)" ;;
[!A-Za-z0-9]*) die "--group '$group' must start with a letter or digit" ;;
esac
[ "${#group}" -le 64 ] || die "--group is longer than 64 characters"

# An http(s) URL of the characters a Tern URL has; "$1" names the flag.
check_url() {
    case "$2" in
    https://*) ;;
    http://*) [ -n "$insecure" ] || die "$1 '$2' is plain http: give an https URL, or --insecure on a lab network" ;;
    *) die "$1 '$2' is not an http(s) URL" ;;
    esac
    case "$2" in
    *[!A-Za-z0-9.:/_\[\]-]*) die "$1 '$2' holds characters a Tern URL does not have" ;;
    esac
}

# A channel is a name of this ternd's (checked as a group name is) or a base URL.
case "$channel" in
'') ;;
http://* | https://*) check_url --channel "$channel" ;;
*[!A-Za-z0-9._-]*)
    die "--channel '$channel' is not a channel name (1-64 letters, digits, '.', '_' or '-') nor an http(s) URL" ;;
[!A-Za-z0-9]*) die "--channel '$channel' must start with a letter or digit" ;;
*) [ "${#channel}" -le 64 ] || die "--channel is longer than 64 characters" ;;
esac
[ -z "$base_url" ] || check_url --base-url "$base_url"

if [ -n "$token_file" ]; then
    [ -z "$token" ] || die "give --join-token or --join-token-file, not both"
    [ -r "$token_file" ] || die "--join-token-file '$token_file' cannot be read"
    token=$(tr -d ' \t\r\n' <"$token_file")
    [ -n "$token" ] || die "--join-token-file '$token_file' is empty"
fi
[ -n "$token" ] || die "a join token is needed: --join-token-file FILE, TERN_JOIN_TOKEN or --join-token (make one with: ternctl tokens create --role join)"
case "$token" in
*[!A-Za-z0-9._-]*)
    die "the join token holds characters no Tern token has (only letters, digits, '.', '_' and '-'): check that it was copied whole" ;;
esac
[ "${#token}" -le 256 ] || die "the join token is longer than 256 characters"

check_url --server "$server"
server=${server%/}
case "$channel" in
'' | http://* | https://*) ;;
*) channel="$server/v1/channels/$channel" ;;
esac

for path in "$prefix" "$root" "$ca_cert" "$service_config"; do
    case "$path" in
    *"$nl"*) die "a path holds a newline: '$path'" ;;
    esac
done
case "$prefix" in
/*) ;;
*) die "--prefix '$prefix' is not an absolute path" ;;
esac
case "$root" in
'' | /*) ;;
*) die "--root '$root' is not an absolute path" ;;
esac
root=${root%/}
if [ -n "$ca_cert" ]; then
    [ -r "$ca_cert" ] || die "--ca-cert '$ca_cert' cannot be read"
    grep -q -- '-----BEGIN CERTIFICATE-----' "$ca_cert" || die "--ca-cert '$ca_cert' holds no PEM certificate"
fi
if [ -n "$service_config" ]; then
    [ -r "$service_config" ] || die "--service-config '$service_config' cannot be read"
fi

command -v curl >/dev/null 2>&1 || die "curl is needed (apt-get install curl)"

machine=$(uname -m)
case "$machine" in
x86_64 | amd64) arch=amd64 ;;
aarch64 | arm64) arch=arm64 ;;
armv7l | armv7 | armhf) arch=arm ;;
i386 | i486 | i586 | i686) arch=386 ;;
riscv64) arch=riscv64 ;;
*) die "this machine's architecture ($machine) has no tern-update build" ;;
esac

line=$(checksums | grep "^$arch " || true)
if [ -z "$line" ]; then
    have=$(checksums | cut -d ' ' -f 1 | tr '\n' ' ')
    die "ternd at $server serves no tern-update for $arch (it has: ${have:-none})"
fi
size=$(printf '%s\n' "$line" | cut -d ' ' -f 2)
sha256=$(printf '%s\n' "$line" | cut -d ' ' -f 3)

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d ' ' -f 1
    elif command -v shasum >/dev/null 2>&1; then
        shasum -a 256 "$1" | cut -d ' ' -f 1
    else
        die "sha256sum (or shasum) is needed to check the download"
    fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Interrupted: exit, which runs the cleanup above (a trap alone would carry on).
trap 'exit 130' INT TERM

# Every request goes to $server only; with --ca-cert, curl trusts only that CA.
set -- -fsS --retry 3 --max-filesize "$size"
if [ -n "$insecure" ]; then
    set -- "$@" --proto '=http,https' --insecure
else
    set -- "$@" --proto '=https'
fi
if [ -n "$ca_cert" ]; then
    set -- "$@" --cacert "$ca_cert"
fi
say "downloading tern-update for linux-$arch from $server"
curl "$@" -o "$tmp/tern-update" "$server/downloads/tern-update/linux-$arch" ||
    die "cannot download $server/downloads/tern-update/linux-$arch (curl exited $?)"

got_size=$(wc -c <"$tmp/tern-update" | tr -d ' ')
[ "$got_size" = "$size" ] || die "the download is $got_size bytes, ternd announced $size: nothing was installed"
got_sha=$(sha256_of "$tmp/tern-update")
[ "$got_sha" = "$sha256" ] || die "checksum mismatch for tern-update: expected $sha256, got $got_sha: nothing was installed"

bin_dir="$root$prefix/bin"
exe="$bin_dir/tern-update"
mkdir -p "$bin_dir" || die "cannot create $bin_dir"
cp "$tmp/tern-update" "$bin_dir/.tern-update.new" || die "cannot write $bin_dir"
chmod 0755 "$bin_dir/.tern-update.new"
mv -f "$bin_dir/.tern-update.new" "$exe" || die "cannot install $exe"
say "installed $exe (sha256 $sha256)"

pinned=''
if [ -n "$ca_cert" ]; then
    # An existing /etc/tern keeps its owner and mode (it may hold ternd's key).
    etc="$root/etc/tern"
    [ -d "$etc" ] || mkdir -p "$etc" || die "cannot create $etc"
    pinned="$etc/ca.pem"
    if [ "$ca_cert" != "$pinned" ]; then
        { cp "$ca_cert" "$pinned.new" && chmod 0644 "$pinned.new" && mv -f "$pinned.new" "$pinned"; } ||
            die "cannot write $pinned"
    fi
    say "pinned ternd's CA: $pinned"
fi

# tern-update with the global flags every command here needs: its dirs under --root,
# the pinned CA, --insecure.
tern_update() {
    if [ -n "$insecure" ]; then
        set -- --insecure "$@"
    fi
    if [ -n "$pinned" ]; then
        set -- --ca-cert "$pinned" "$@"
    fi
    if [ -n "$root" ]; then
        set -- --install-dir "$root/opt/tern" --link-dir "$root/usr/local/bin" \
            --unit-dir "$root/usr/local/lib/systemd/system" \
            --systemd-dir "$root/etc/systemd/system" "$@"
    fi
    "$exe" "$@"
}

# The token goes to a file only root can read, never onto tern-update's command line;
# the file goes with the temp dir once the host has its own credential.
join="$tmp/join.token"
(umask 077 && printf '%s\n' "$token" >"$join") || die "cannot write the join token"

set -- enable --server "$server" --join-token-file "$join"
if [ -n "$group" ]; then
    set -- "$@" --group "$group"
fi
if [ -n "$channel" ]; then
    set -- "$@" --channel "${channel%/}"
fi
if [ -n "$base_url" ]; then
    set -- "$@" --base-url "${base_url%/}"
fi
if [ -n "$service_config" ]; then
    set -- "$@" --service-config "$service_config"
fi
say "enrolling this host with $server${group:+ in group $group}${channel:+, following the channel $channel}"
tern_update "$@" || die "tern-update enable failed (exit $?): tern-update is installed at $exe; fix the cause above and run this again"

if [ -z "$setup" ]; then
    say "enrolled; --no-setup: run '$exe setup' to start the updater's timer"
elif [ -n "$root" ] && [ -z "${TERN_SYSTEMCTL:-}" ]; then
    # An install under another root must not touch this machine's systemd.
    say "enrolled; under --root the timer is not set up: run '$exe setup' on the host itself"
else
    tern_update setup || die "tern-update setup failed (exit $?): the host is enrolled; run '$exe setup' again"
fi
say "done: tern-update is installed at $exe and enrolled with $server"
