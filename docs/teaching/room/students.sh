#!/usr/bin/env bash
# The accounts of the workshop room (docs/teaching/ROOM.md), run as root:
#
#   bash students.sh add student 25 > passwords.csv     student1..student25, a fresh password each (name,password)
#   bash students.sh add teacher > teacher.csv          one account named teacher (the hub's admin: ROOM.md)
#   bash students.sh remove student 25                  after the workshop: the accounts, their homes, their processes
#   bash students.sh remove teacher                     and what they left in /tmp, /var/tmp and /dev/shm
#
# Each account is in the group $INTERPLAB_ROOM_GROUP (default interplab-students: the hub lets only that group log
# in; close SSH to it, ROOM.md), has a login shell (the hub's terminals) and a home only its owner can enter (chmod
# 700: Debian's useradd makes homes readable by everyone).
set -euo pipefail
group=${INTERPLAB_ROOM_GROUP:-interplab-students}
cmd=${1:-} prefix=${2:-} n=${3:-}
usage() { echo "usage: $0 add|remove PREFIX N   (PREFIX1..PREFIXN)  or  $0 add|remove NAME   (one account)" >&2; exit 2; }
if [ -z "$cmd" ] || [ -z "$prefix" ] || { [ -n "$n" ] && ! [[ "$n" =~ ^[0-9]+$ ]]; }; then
  usage
fi
[ "$(id -u)" = 0 ] || { echo "$0: run as root" >&2; exit 2; }
if [ -n "$n" ]; then
  users=$(seq -f "$prefix%g" 1 "$n")
else
  users=$prefix
fi
case "$cmd" in
  add)
    getent group "$group" >/dev/null || groupadd "$group"
    echo "name,password"
    for user in $users; do
      pass=$(head -c 12 /dev/urandom | base64 | tr -d '/+=' | head -c 10)
      useradd -m -s /bin/bash -G "$group" "$user"
      chmod 700 "$(getent passwd "$user" | cut -d: -f6)"
      echo "$user:$pass" | chpasswd
      echo "$user,$pass"
    done
    ;;
  remove)
    for user in $users; do
      if id -u "$user" >/dev/null 2>&1; then
        pkill -KILL -u "$user" || true  # the student's server and kernels: userdel refuses while they run
        # what they left outside their home (torch's /tmp/torchinductor_NAME, shared memory): the next account
        # made would get the same uid, and these files with it
        find /tmp /var/tmp /dev/shm -xdev -mindepth 1 -user "$user" -prune -exec rm -rf {} + 2>/dev/null || true
        crontab -r -u "$user" 2>/dev/null || true
        userdel -r "$user" 2>/dev/null || userdel "$user"
      fi
    done
    if getent group "$group" >/dev/null && [ -z "$(getent group "$group" | cut -d: -f4)" ]; then
      groupdel "$group"
    fi
    ;;
  *)
    usage
    ;;
esac
