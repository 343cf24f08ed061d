# ~/.profile: executed by Bourne-compatible login shells.
#
# Paddock's sandbox image: Debian's root .profile, with one change (issue
# 26): mesg n runs only when stdin is a terminal, the only case it does
# anything in (elsewhere it fails, and cost every login shell a fork and
# an exec).

if [ "$BASH" ]; then
  if [ -f ~/.bashrc ]; then
    . ~/.bashrc
  fi
fi

if [ -t 0 ]; then
  mesg n 2> /dev/null || true
fi
