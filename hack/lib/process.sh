#!/usr/bin/env bash
# Process management of the hack/*-up.sh and *-down.sh scripts: the servers they start (etcd,
# the kube-* components, kwok, PostgreSQL, MinIO) outlive them, so a server is found again by
# its pid file or by its command line, checked by name (a pid may have been reused), started
# detached, and stopped with a grace period before SIGKILL. The checks read /proc with bash
# builtins only: they run in polling loops, ten times a second, over every process.

# proc::state PID: sets REPLY to the state letter of PID (R, S, D, Z, X, ...: field 3 of
# /proc/PID/stat, proc(5)); fails when PID is gone. The command name, field 2, may hold spaces
# and parentheses, hence the cut after the last ") ".
proc::state() {
	local stat=""
	REPLY=""
	IFS= read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
	stat="${stat##*) }"
	REPLY="${stat:0:1}"
}

# proc::running PID: PID is a process that is neither a zombie nor dead.
proc::running() {
	[[ "$1" =~ ^[0-9]+$ ]] && proc::state "$1" && [[ "${REPLY}" != Z && "${REPLY}" != X ]]
}

# proc::alive PID NAME: PID is running (proc::running) and its argv[0] is NAME (its base name),
# or it set its title to "NAME: ..." as PostgreSQL's processes do: a pid read from a file may
# have been reused by another program since.
proc::alive() {
	local pid="$1" name="$2" arg0=""
	[[ "${pid}" =~ ^[0-9]+$ && -r "/proc/${pid}/cmdline" ]] || return 1
	IFS= read -r -d '' arg0 2>/dev/null <"/proc/${pid}/cmdline" || [[ -n "${arg0}" ]] || return 1
	[[ "${arg0##*/}" == "${name}" || "${arg0}" == "${name}:"* ]] || return 1
	proc::running "${pid}"
}

# proc::pid_from_file FILE NAME: prints the pid on the first line of FILE when that process is
# alive and is NAME (proc::alive); fails otherwise, and when FILE does not exist.
proc::pid_from_file() {
	local file="$1" name="$2" pid=""
	[[ -f "${file}" ]] || return 1
	IFS= read -r pid 2>/dev/null <"${file}" || [[ -n "${pid}" ]] || return 1
	proc::alive "${pid}" "${name}" || return 1
	echo "${pid}"
}

# proc::find PIDFILE MENTION NAME: the live NAME processes of one server, one pid a line,
# sorted, each once: the pid recorded in PIDFILE, plus every NAME process whose command line
# (its arguments joined by spaces, with a space either side) contains MENTION (a fixed string,
# e.g. "<dir>/" or " <dir> "), which finds a server whose pid file was lost.
proc::find() {
	local file="$1" mention="$2" name="$3" p pid
	local -a args
	{
		proc::pid_from_file "${file}" "${name}" || true
		for p in /proc/[0-9]*; do
			pid="${p#/proc/}"
			proc::alive "${pid}" "${name}" || continue
			mapfile -d '' args 2>/dev/null <"${p}/cmdline" || continue
			if [[ " ${args[*]} " == *"${mention}"* ]]; then echo "${pid}"; fi
		done
	} | sort -u
}

# proc::port_in_use PORT: something accepts connections on 127.0.0.1:PORT (bash's /dev/tcp).
proc::port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# proc::start LOG PIDFILE COMMAND...: starts COMMAND detached: in a session of its own (setsid,
# so it outlives the script: no SIGHUP, no ^C), stdin from /dev/null, stdout and stderr appended
# to LOG, without fd 9 (the lock of proc::lock, which must end with the script). Writes its pid
# to PIDFILE and to PROC_PID.
proc::start() {
	local log="$1" pidfile="$2"
	shift 2
	setsid "$@" </dev/null >>"${log}" 2>&1 9>&- &
	PROC_PID=$!
	echo "${PROC_PID}" >"${pidfile}"
}

# proc::last_start_says LOG PATTERN: whether the output of the last start in LOG, the lines
# after its last "===== <time> starting <name>" line (cluster-up.sh's start writes it), has a
# line that matches PATTERN (an extended regular expression).
proc::last_start_says() {
	awk '/^===== [^ ]+ starting /{n = 0; next} {line[n++] = $0} END {for (i = 0; i < n; i++) print line[i]}' "$1" |
		grep -qE -- "$2"
}

# proc::wait_until PID TIMEOUT COMMAND...: runs COMMAND (output discarded) every 0.2 s until it
# succeeds (0), the server PID that proc::start started is no longer running (1), or TIMEOUT
# seconds have passed (2). No name check (proc::alive): right after proc::start the process may
# still be setsid or env, not yet the server, and the script is its parent, so its pid cannot
# have gone to another program.
proc::wait_until() {
	local pid="$1" deadline=$((SECONDS + $2))
	shift 2
	until "$@" >/dev/null 2>&1; do
		proc::running "${pid}" || return 1
		((SECONDS < deadline)) || return 2
		sleep 0.2
	done
}

# proc::lock FILE [OWNER...]: takes an exclusive flock(1) on FILE through fd 9, waiting up to
# 120 s: one up/down script at a time per state directory. Returns 0 once locked (or at once
# when flock(1) is not installed), 1 on timeout, and 3 when the lock is held only by processes
# named OWNER: servers started by an older script that leaked fd 9 to them; the caller may go
# on. The lock ends with the script; proc::start keeps it from the servers.
proc::lock() {
	local file="$1" deadline=$((SECONDS + 120))
	shift
	command -v flock >/dev/null 2>&1 || return 0
	exec 9>"${file}"
	until flock -n 9; do
		if (($#)) && proc::_held_only_by "${file}" "$@"; then
			return 3
		fi
		((SECONDS < deadline)) || return 1
		sleep 0.5
	done
}

# proc::_held_only_by FILE NAME...: every other process with FILE open is one of NAME, and
# there is at least one.
proc::_held_only_by() {
	local file="$1" fd pid arg0 seen=0
	shift
	for fd in /proc/[0-9]*/fd/*; do
		[[ "${fd}" -ef "${file}" ]] || continue
		pid="${fd#/proc/}"
		pid="${pid%%/*}"
		[[ "${pid}" == "$$" || "${pid}" == "${BASHPID}" ]] && continue
		arg0=""
		IFS= read -r -d '' arg0 2>/dev/null <"/proc/${pid}/cmdline" || [[ -n "${arg0}" ]] || continue
		[[ " $* " == *" ${arg0##*/} "* ]] || return 1
		seen=1
	done
	((seen))
}

# proc::stop SIGNAL GRACE TARGET...: stops a server's processes. A TARGET is PID:NAME, sent
# SIGNAL (TERM, or INT for PostgreSQL's fast shutdown), or PID:NAME:wait, only waited for (a
# server's own children, which it stops itself). Logs "stopping NAME (pid ...)", waits up to
# GRACE seconds for every target to be gone (proc::alive), SIGKILLs the rest, then gives their
# parent (usually PID 1: the servers outlive the up script) up to 3 s to reap them, so that a
# pgrep right after finds no <defunct> entry. Returns 1 when a target outlives SIGKILL.
proc::stop() {
	local signal="$1" grace="$2" t pid name mode deadline failed=0
	shift 2
	local -a targets=("$@") signalled=() remaining=()
	for t in "${targets[@]}"; do
		IFS=: read -r pid name mode <<<"${t}"
		[[ "${mode}" == wait ]] || signalled+=("${t}")
	done
	proc::_log_by_name 'stopping %s (pid %s)' "${signalled[@]}"
	for t in "${signalled[@]}"; do
		kill -s "${signal}" "${t%%:*}" 2>/dev/null || true
	done
	deadline=$((SECONDS + grace))
	while :; do
		remaining=()
		for t in "${targets[@]}"; do
			IFS=: read -r pid name mode <<<"${t}"
			if proc::alive "${pid}" "${name}"; then remaining+=("${t}"); fi
		done
		((${#remaining[@]})) || break
		if ((SECONDS >= deadline)); then
			if [[ "${signal}" == TERM ]]; then
				proc::_log_by_name "%s (pid %s) ignored SIGTERM for ${grace}s: SIGKILL" "${remaining[@]}"
			else
				proc::_log_by_name "%s (pid %s) did not stop within ${grace}s: SIGKILL" "${remaining[@]}"
			fi
			for t in "${remaining[@]}"; do
				kill -s KILL "${t%%:*}" 2>/dev/null || true
			done
			sleep 0.5
			for t in "${remaining[@]}"; do
				IFS=: read -r pid name mode <<<"${t}"
				if proc::alive "${pid}" "${name}"; then
					log::error "${name} (pid ${pid}) is still running after SIGKILL"
					failed=1
				fi
			done
			break
		fi
		sleep 0.1
	done
	deadline=$((SECONDS + 3))
	for t in "${targets[@]}"; do
		while proc::state "${t%%:*}" && [[ "${REPLY}" == Z ]] && ((SECONDS < deadline)); do
			sleep 0.1
		done
	done
	return "${failed}"
}

# proc::_log_by_name FORMAT TARGET...: one log::info line per NAME among TARGETs (PID:NAME[:wait]),
# in their order, FORMAT taking the name and its pids ("kwok", "123 456").
proc::_log_by_name() {
	local format="$1" t name pids
	local -a names=()
	shift
	for t in "$@"; do
		name="${t#*:}"
		name="${name%%:*}"
		[[ " ${names[*]} " == *" ${name} "* ]] || names+=("${name}")
	done
	for name in "${names[@]}"; do
		pids=""
		for t in "$@"; do
			[[ "${t}" == *":${name}" || "${t}" == *":${name}:"* ]] && pids+="${pids:+ }${t%%:*}"
		done
		# shellcheck disable=SC2059 # FORMAT is the caller's fixed format
		log::info "$(printf "${format}" "${name}" "${pids}")"
	done
}
