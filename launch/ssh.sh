#!/bin/bash
# Multi-node GRPO on plain hosts reached by SSH: `hf-grpo serve` on SERVER_HOSTS, then `accelerate launch` on every
# one of TRAINER_HOSTS (the first is the rendezvous), from one recipe; the Slurm version is launch/slurm.sbatch.
#   TRAINER_HOSTS="h1 h2" SERVER_HOSTS="s1" RECIPE=recipes/gpu_multinode_server.yaml \
#       ACCELERATE_CONFIG=accelerate_configs/zero3.yaml PROCESSES_PER_NODE=8 bash launch/ssh.sh [train.py args]
# Run from the repository root; every host runs `cd DIR && <command>` (DIR: this folder, the same path on every host;
# SETUP, e.g. "source .venv/bin/activate", runs first where a login shell does not put hf-grpo on PATH).
# The commands come from `hf-grpo plan` (hf_grpo/runtime/launching.py); DRY_RUN=1 prints them instead.
set -euo pipefail

TRAINER_HOSTS=${TRAINER_HOSTS:-}
SERVER_HOSTS=${SERVER_HOSTS:-}
RECIPE=${RECIPE:-recipes/gpu_multinode_server.yaml}
ACCELERATE_CONFIG=${ACCELERATE_CONFIG:-accelerate_configs/zero3.yaml}
PROCESSES_PER_NODE=${PROCESSES_PER_NODE:-8}
MODEL=${MODEL:-} # default: the recipe's model_name_or_path
SERVER_PORT=${SERVER_PORT:-8000}
MAIN_PROCESS_PORT=${MAIN_PROCESS_PORT:-29500}
# One vLLM server per server host, data-parallel over its 8 GPUs, ready for NCCL weight transfer (SERVE_ARGS= for none).
SERVE_ARGS=${SERVE_ARGS-"--dtype bfloat16 --data-parallel-size 8 --max-model-len 2560 --weight-transfer nccl"}
HEALTH_TIMEOUT=${HEALTH_TIMEOUT:-900} # seconds; servers compile CUDA graphs at start
DIR=${DIR:-$PWD}
SETUP=${SETUP:-}
NAME=ssh.sh

if [[ -z $TRAINER_HOSTS ]]; then
    echo "$NAME: set TRAINER_HOSTS to the training hosts, space-separated (TRAINER_HOSTS=\"h1 h2\")" >&2
    exit 2
fi
if ! command -v hf-grpo >/dev/null; then
    echo "$NAME: hf-grpo is not on PATH; activate the project's environment (e.g. source .venv/bin/activate)" >&2
    exit 2
fi
joined() { local IFS=,; echo "$*"; }
read -ra TRAINERS <<<"$TRAINER_HOSTS"
read -ra SERVERS <<<"$SERVER_HOSTS"
PLAN_ARGS=(--trainer-hosts "$(joined "${TRAINERS[@]}")" --processes-per-node "$PROCESSES_PER_NODE"
    --accelerate-config "$ACCELERATE_CONFIG" --recipe "$RECIPE" --server-port "$SERVER_PORT"
    --main-process-port "$MAIN_PROCESS_PORT" --serve-args="$SERVE_ARGS" --format tsv)
if ((${#SERVERS[@]} > 0)); then PLAN_ARGS+=(--server-hosts "$(joined "${SERVERS[@]}")"); fi
if [[ -n $MODEL ]]; then PLAN_ARGS+=(--model "$MODEL"); fi
PLAN_TSV=$(cd "$DIR" && hf-grpo plan "${PLAN_ARGS[@]}" -- "$@") # a bad argument stops here, naming the flag
mapfile -t PLAN <<<"$PLAN_TSV"

# `word` as is where the shell would read it back unchanged, else single-quoted: printed lines can be pasted.
quoted() {
    local out=() word
    for word in "$@"; do
        if [[ $word =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then out+=("$word"); else out+=("${word@Q}"); fi
    done
    echo "${out[*]}"
}

SERVER_PIDS=() SERVER_URLS=() TRAINER_PIDS=()
# Start (or with DRY_RUN=1 print) every planned command of one role, each on its own host.
start_role() {
    local entry host role rank line remote run label
    for entry in "${PLAN[@]}"; do
        IFS=$'\t' read -r host role rank line <<<"$entry"
        [[ $role == "$1" ]] || continue
        remote="cd $(printf %q "$DIR") && ${SETUP:+$SETUP && }$line"
        # -tt: killing this ssh closes the remote terminal, which hangs up (stops) the remote command too.
        # BatchMode: a host that would ask for a password fails at once instead of waiting in the background.
        run=(ssh -tt -o BatchMode=yes "$host" "$remote")
        if [[ ${DRY_RUN:-0} == 1 ]]; then
            label=$role
            if [[ $rank != - ]]; then label+=" rank $rank"; fi
            printf '# %s (%s)\n%s\n' "$host" "$label" "$(quoted "${run[@]}")"
            continue
        fi
        "${run[@]}" </dev/null &
        if [[ $role == server ]]; then
            SERVER_PIDS+=($!)
            [[ $line =~ --port\ ([0-9]+) ]] # the planner always passes --port
            SERVER_URLS+=("http://$host:${BASH_REMATCH[1]}/health")
        else
            TRAINER_PIDS+=($!)
        fi
    done
}

# Until `url` answers; fails naming it when its server exits first or HEALTH_TIMEOUT seconds pass.
wait_healthy() {
    local url=$1 pid=$2 deadline=$((SECONDS + HEALTH_TIMEOUT))
    until curl -sf -o /dev/null --max-time 5 "$url"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$NAME: the server for $url exited before it answered" >&2
            return 1
        fi
        if ((SECONDS >= deadline)); then
            echo "$NAME: $url did not answer within ${HEALTH_TIMEOUT}s (raise HEALTH_TIMEOUT?)" >&2
            return 1
        fi
        sleep 5
    done
}

stop_all() {
    local pid
    for pid in "${TRAINER_PIDS[@]}" "${SERVER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait || true
}

if [[ ${DRY_RUN:-0} == 1 ]]; then
    start_role server
    start_role trainer
    exit 0
fi
trap stop_all EXIT
trap 'exit 143' TERM INT # so that Ctrl-C still stops every host's command
start_role server
for i in "${!SERVER_PIDS[@]}"; do wait_healthy "${SERVER_URLS[i]}" "${SERVER_PIDS[i]}"; done
start_role trainer
status=0
for pid in "${TRAINER_PIDS[@]}"; do wait "$pid" || status=$?; done
exit "$status" # the EXIT trap stops the servers
