#!/usr/bin/env bash
# The accounts of the workshop room (docs/teaching/ROOM.md), run as root:
#
#   bash students.sh add student 25 > passwords.csv     student1..student25, a fresh password each (name,password)
#   bash students.sh add-teacher teacher > teacher.csv  one account named teacher (the hub's admin: ROOM.md)
#   bash students.sh remove student 25                  after the workshop: the accounts, their homes, their processes,
#   bash students.sh remove teacher                     what they left behind, and their users in the hub
#
# Each student is in the group $INTERPLAB_ROOM_GROUP (default interplab-students: the hub lets only that group log
# in; close SSH to it, ROOM.md); a teacher (add-teacher) is in $INTERPLAB_ROOM_TEACHERS instead (default
# interplab-teachers), which the hub also lets in and the SSH rule for students does not lock out. Each has a login shell (the hub's terminals), a home only its
# owner can enter (chmod 700: Debian's useradd makes homes readable by everyone), and a loopback firewall rule: no
# other account of the room can connect to a TCP port it listens on (a kernel's subprocess-output port: ROOM.md).
#
# remove also deletes the account's user in the hub (its tokens, server record and login), through the hub's REST
# API when the hub runs, in its database when it does not ($INTERPLAB_ROOM_STATE, default /srv/jupyterhub): the
# next account of that name must not inherit the old one's tokens.
set -euo pipefail
umask 077  # the password lists this prints and any file made here: root's only
group=${INTERPLAB_ROOM_GROUP:-interplab-students}
teachers=${INTERPLAB_ROOM_TEACHERS:-interplab-teachers}
state=${INTERPLAB_ROOM_STATE:-/srv/jupyterhub}
chain=interplab-room  # iptables: the room's loopback rules, one pair per account
deny=0x80000000       # the mark of a connection between two accounts of the room (above every uid)
cmd=${1:-} prefix=${2:-} n=${3:-}
usage() { echo "usage: $0 add|add-teacher|remove PREFIX N   (PREFIX1..PREFIXN)  or  $0 add|add-teacher|remove NAME" >&2; exit 2; }
if [ -z "$cmd" ] || [ -z "$prefix" ] || { [ -n "$n" ] && ! [[ "$n" =~ ^[0-9]+$ ]]; }; then
  usage
fi
[ "$(id -u)" = 0 ] || { echo "$0: run as root" >&2; exit 2; }
if [ -n "$n" ]; then
  users=$(seq -f "$prefix%g" 1 "$n")
else
  users=$prefix
fi

# ---- the loopback firewall -----------------------------------------------------------------------------------------
# A connection made by a room account gets that account's uid as its conntrack mark; the SYN-ACK of a room account's
# listening socket to a connection marked with another uid is dropped and the connection marked denied, and the
# caller's next SYN (a second later) is answered with a reset: "connection refused". Connections from root (the hub,
# its proxy) and between an account's own processes are untouched.
firewall_rules() {  # UID: the account's two rules
  echo "-m conntrack --ctstate NEW -m owner --uid-owner $1 -j CONNMARK --set-mark $1"
  echo "--tcp-flags SYN,ACK SYN,ACK -m owner --uid-owner $1 -m connmark ! --mark 0 -m connmark ! --mark $1 -j $chain-deny"
}
firewall_setup() {
  command -v iptables >/dev/null || { echo "$0: iptables is missing (ROOM.md step 1: apt-get install -y iptables)" >&2; exit 1; }
  if ! iptables -n -L "$chain" >/dev/null 2>&1; then
    iptables -N "$chain-deny"
    iptables -A "$chain-deny" -j CONNMARK --set-mark "$deny"
    iptables -A "$chain-deny" -j DROP
    iptables -N "$chain"
    # the caller's next SYN: a reset (not the reset itself: it passes here too, with the connection's mark)
    iptables -A "$chain" -p tcp --syn -m connmark --mark "$deny" -j REJECT --reject-with tcp-reset
    iptables -A "$chain" -p tcp ! --tcp-flags RST RST -m connmark --mark "$deny" -j DROP
  fi
  iptables -C OUTPUT -o lo -p tcp -j "$chain" 2>/dev/null || iptables -A OUTPUT -o lo -p tcp -j "$chain"
}
firewall() {  # -A|-D UID
  [ "$1" = -D ] && ! iptables -n -L "$chain" >/dev/null 2>&1 && return 0
  while read -r rule; do
    # shellcheck disable=SC2086  # the rule's words
    if [ "$1" = -A ] || iptables -C "$chain" -p tcp $rule 2>/dev/null; then iptables "$1" "$chain" -p tcp $rule; fi
  done < <(firewall_rules "$2")
}

# ---- the hub forgets the account -------------------------------------------------------------------------------------
# jupyterhub_config.py writes the hub's API address and a token of its service room-accounts (admin:users) into the
# state folder, root's only.
forget_in_hub() {  # NAME
  [ -f "$state/room-accounts.token" ] || return 0  # no hub was ever started with this state folder
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE --max-time 120 \
         -H @<(printf 'Authorization: token %s\n' "$(cat "$state/room-accounts.token")") \
         "$(cat "$state/room-accounts.url")/users/$1") || code=000
  case "$code" in
    204|404) ;;  # deleted (its server stopped, its tokens gone), or the hub never knew it
    000)         # the hub is down: its database (SQLite enforces the cascade to tokens and servers when asked)
      [ -f "$state/jupyterhub.sqlite" ] || return 0
      python3 - "$state/jupyterhub.sqlite" "$1" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("PRAGMA foreign_keys = ON")
db.execute("DELETE FROM users WHERE name = ?", (sys.argv[2],))
db.commit()
EOF
      ;;
    *) echo "$0: the hub refused to delete the user $1 (HTTP $code): delete it on /hub/admin" >&2; exit 1 ;;
  esac
}

# ---- what an account leaves outside its home -------------------------------------------------------------------------
# Every directory anyone may write (sticky /tmp, /var/tmp, /dev/shm, /run/lock, POSIX message queues) and the SysV
# IPC objects (shared memory, semaphores, message queues): the next account made would get the same uid, and these.
SHARED_DIRS="/tmp /var/tmp /dev/shm /run/lock /dev/mqueue"
leftovers_remove() {  # NAME UID
  local d
  for d in $SHARED_DIRS; do
    [ -d "$d" ] && find "$d" -xdev -mindepth 1 -user "$1" -prune -exec rm -rf {} + 2>/dev/null || true
  done
  local kind flag
  for kind in shm:-m sem:-s msg:-q; do
    flag=${kind#*:}
    [ -r "/proc/sysvipc/${kind%%:*}" ] || continue
    # the object's id (column 2) where its owner or creator (columns named uid, cuid) is the account
    awk -v u="$2" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
                   $col["uid"] == u || $col["cuid"] == u { print $2 }' "/proc/sysvipc/${kind%%:*}" |
      while read -r id; do ipcrm "$flag" "$id" 2>/dev/null || true; done
  done
  crontab -r -u "$1" 2>/dev/null || true
}

case "$cmd" in
  add|add-teacher)
    if [ "$cmd" = add ]; then in=$group; else in=$teachers; fi
    getent group "$in" >/dev/null || groupadd "$in"
    firewall_setup
    echo "name,password"
    for user in $users; do
      pass=$(head -c 12 /dev/urandom | base64 | tr -d '/+=' | head -c 10)
      useradd -m -s /bin/bash -G "$in" "$user"
      chmod 700 "$(getent passwd "$user" | cut -d: -f6)"
      echo "$user:$pass" | chpasswd
      firewall -A "$(id -u "$user")"
      echo "$user,$pass"
    done
    ;;
  remove)
    for user in $users; do
      forget_in_hub "$user"  # first: the hub stops the account's server
      if id -u "$user" >/dev/null 2>&1; then
        uid=$(id -u "$user")
        pkill -KILL -u "$user" || true  # the student's server and kernels: userdel refuses while they run
        leftovers_remove "$user" "$uid"
        userdel -r "$user" 2>/dev/null || userdel "$user"
        firewall -D "$uid"
      fi
    done
    for g in "$group" "$teachers"; do
      if getent group "$g" >/dev/null && [ -z "$(getent group "$g" | cut -d: -f4)" ]; then
        groupdel "$g"
      fi
    done
    # the last account gone (no --uid-owner rule left): the room's chains go too
    if rules=$(iptables -S "$chain" 2>/dev/null) && [[ $rules != *--uid-owner* ]]; then
      iptables -D OUTPUT -o lo -p tcp -j "$chain" 2>/dev/null || true
      iptables -F "$chain" && iptables -X "$chain" && iptables -F "$chain-deny" && iptables -X "$chain-deny"
    fi
    ;;
  *)
    usage
    ;;
esac
