#!/usr/bin/env bash
# The students' system accounts for the workshop room (docs/teaching/ROOM.md), run as root:
#
#   bash students.sh add student 25 > passwords.csv     student1..student25, a fresh password each (name,password)
#   bash students.sh remove student 25                  the accounts and their homes, after the workshop
#
# Each account is in the group $INTERPLAB_ROOM_GROUP (default interplab-students: the hub lets only that group log
# in), has a login shell (the hub's terminals) and a home only its owner can read (chmod 700: Debian's useradd makes
# homes readable by everyone).
set -euo pipefail
group=${INTERPLAB_ROOM_GROUP:-interplab-students}
cmd=${1:-} prefix=${2:-} n=${3:-}
if [ -z "$cmd" ] || [ -z "$prefix" ] || ! [[ "$n" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 add|remove PREFIX N" >&2
  exit 2
fi
[ "$(id -u)" = 0 ] || { echo "$0: run as root" >&2; exit 2; }
case "$cmd" in
  add)
    getent group "$group" >/dev/null || groupadd "$group"
    echo "name,password"
    for i in $(seq 1 "$n"); do
      user="$prefix$i"
      pass=$(head -c 12 /dev/urandom | base64 | tr -d '/+=' | head -c 10)
      useradd -m -s /bin/bash -G "$group" "$user"
      chmod 700 "$(getent passwd "$user" | cut -d: -f6)"
      echo "$user:$pass" | chpasswd
      echo "$user,$pass"
    done
    ;;
  remove)
    for i in $(seq 1 "$n"); do
      user="$prefix$i"
      if id -u "$user" >/dev/null 2>&1; then
        pkill -KILL -u "$user" || true  # the student's server and kernels: userdel refuses while they run
        userdel -r "$user" 2>/dev/null || userdel "$user"
      fi
    done
    if getent group "$group" >/dev/null && [ -z "$(getent group "$group" | cut -d: -f4)" ]; then
      groupdel "$group"
    fi
    ;;
  *)
    echo "usage: $0 add|remove PREFIX N" >&2
    exit 2
    ;;
esac
