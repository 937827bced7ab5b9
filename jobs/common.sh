# Sourced (by bash) from every job script in jobs/.  It prepares the
# environment and defines two functions:
#
#   mpips_train PARADIGM [FLAGS...]   launch `python -m mpips train` on
#                                     the ranks the settings need (mpips ranks)
#   mpips_launch N COMMAND...         launch any command on N MPI ranks
#
# Nothing needs editing for a small run; environment variables override the
# defaults (sbatch passes the submitting shell's environment to the job):
#
#   MPIPS_<FIELD>      any configuration field, upper case: MPIPS_EPOCHS=1,
#                      MPIPS_WORKERS=2, MPIPS_SLOWDOWN=1,2, MPIPS_STALENESS=5 ...
#                      becomes --epochs 1 --workers 2 ..., MPIPS_NESTEROV=1|0 becomes
#                      --nesterov|--no-nesterov (defaults: 1 server,
#                      4 workers; the rest from mpips/config.py)
#   MPIPS_CONFIG       a YAML file, passed as --config
#   MPIPS_ARGS         extra flags, appended last (they win)
#   MPIPS_RUN_DIR      run directory; default runs/$SLURM_JOB_ID in the repository
#   MPIPS_ROOT         the repository (default: found from the submit directory)
#   MPIPS_VENV         environment to activate (default: $MPIPS_ROOT/.venv if present;
#                      "none" keeps the current one, e.g. after `module load`)
#   MPIPS_LAUNCHER     mpirun (default) or srun; srun needs Slurm's pmix (Open MPI)
#                      or pmi2 (MPICH) plugin, else it falls back to mpirun
#   MPIPS_SRUN_MPI     the --mpi= plugin for srun (default: chosen from `srun --mpi=list`)
#   MPIPS_MPIRUN_ARGS  extra arguments for mpirun/mpiexec
#   MPIPS_REQUEUE      1 (default): requeue the job when the training exits with
#                      status 3 (checkpointed after SIGUSR1, not finished)
#   MPIPS_MPS          with MPIPS_DEVICE=cuda: 1 starts NVIDIA MPS on every node of
#                      the job for the run, 0 never; auto (default) when ranks
#                      share a node's GPUs
#   MPIPS_LOST_NODE_WAIT  several nodes: after a training failed and a node of the
#                      job no longer answers, how long to wait for Slurm to requeue
#                      the job (it does once the node misses SlurmdTimeout) before
#                      requeueing it here (default 600 s)
#   MPIPS_NET_IF       several nodes: the network interface (or a subnet,
#                      10.1.0.0/16) the ranks talk over, for nodes with several
#                      (default: the MPI's choice)
#
# GPUs: ask Slurm for them and say cuda, e.g.
#     MPIPS_DEVICE=cuda sbatch --gpus-per-node=4 jobs/<paradigm>.slurm
# Workers and the evaluator compute on GPUs, servers (group servers too)
# apply on CPUs beside their windows. The GPU ranks of a node take its GPUs in
# turn: one each when there are enough, shared round-robin when not (a GPU per
# task: --gpus-per-task=1, each rank then sees its own). Ranks sharing a GPU are
# time-sliced by the driver unless MPS runs their kernels side by side: on one
# H100, 8 workers sharing it went from 18,300 to 34,200 samples/s under MPS
# (benchmarks/results/gpu.md). A job of several nodes starts MPS on each
# (a step of one task per node, for the run), its pipes in a folder per host.
#
# Several nodes (sbatch -N 3): nothing to change; see docs/multinode.md. The
# ranks talk over TCP unless the MPI finds a faster network: an Open MPI
# component list without tcp (OMPI_MCA_btl=self,sm, for one node) gets it.
#
# Exit statuses: 0 finished, 1 failed or diverged, 2 bad input, 3 checkpointed
# after SIGUSR1 (requeued), 128+N checkpointed after signal N (SIGTERM 143,
# SIGINT 130: not requeued; the same job again resumes). Open MPI's mpirun,
# signalled TERM or INT itself (scancel and a time limit signal every process
# of the job), kills its ranks about half a second after passing it on: a job
# stopped so exits 128+N if they checkpointed in that time, else 1.
#
# SIGUSR1 protocol: Slurm signals this shell T seconds before the time limit
# (#SBATCH --signal=B:USR1@T); the shell forwards USR1 to the launcher (mpirun
# passes it on to every rank). The trainer writes a checkpoint and exits with
# status 3 if it has not finished (0 if it has; see mpips/runtime/recovery/checkpointer.py); the
# job is then requeued with the same SLURM_JOB_ID, hence the same run
# directory, and resumes there from the checkpoint.

_mpips_log() { echo "[mpips job] $*"; }
_mpips_err() { echo "[mpips job] $*" >&2; }

# --- the repository -----------------------------------------------------------
# Slurm runs a copy of the batch script from its spool directory, so the
# script's own path says nothing; this file's path does when it was sourced
# by its real path, which the job scripts arrange.
if [ -z "${MPIPS_ROOT:-}" ]; then
    MPIPS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fi
MPIPS_ROOT="$(cd "$MPIPS_ROOT" && pwd)"
export MPIPS_ROOT

# --- the Python environment ---------------------------------------------------
if [ "${MPIPS_VENV:-}" != "none" ]; then
    _mpips_venv="${MPIPS_VENV:-$MPIPS_ROOT/.venv}"
    if [ -f "$_mpips_venv/bin/activate" ]; then
        # shellcheck disable=SC1091
        . "$_mpips_venv/bin/activate"
    elif [ -n "${MPIPS_VENV:-}" ]; then
        _mpips_err "MPIPS_VENV=$MPIPS_VENV has no bin/activate"
    fi
fi
# `python -m mpips` works from any working directory, installed or not.
export PYTHONPATH="$MPIPS_ROOT${PYTHONPATH:+:$PYTHONPATH}"
MPIPS_PYTHON="${MPIPS_PYTHON:-$(command -v python || command -v python3)}"

# One compute thread per rank: ranks share the cores already.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
export MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"

if [ "$(id -u)" = 0 ]; then
    # Open MPI refuses root unless told, and CI nodes have fewer cores than ranks. (OMPI_MCA_osc:
    # mpips turns off UCX's one-sided component itself on nodes without RDMA devices.)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export PRTE_MCA_rmaps_default_mapping_policy="${PRTE_MCA_rmaps_default_mapping_policy-:oversubscribe}"
fi

# --- which MPI ------------------------------------------------------------------
# The library mpi4py was built against decides; asked without MPI_Init.
mpips_mpi_flavor() {
    local v
    v="$("$MPIPS_PYTHON" -c 'import mpi4py; mpi4py.rc.initialize = mpi4py.rc.finalize = False
from mpi4py import MPI; print(MPI.Get_library_version())' 2>/dev/null | tr -d '\0')"
    [ -n "$v" ] || v="$( (mpirun --version || mpiexec --version) 2>&1 | tr -d '\0')"
    case "$v" in
        *"Open MPI"*|*"OpenRTE"*|*"PRRTE"*) echo openmpi ;;
        *MPICH*|*HYDRA*|*"Intel(R) MPI"*|*MVAPICH*) echo mpich ;;
        *) echo unknown ;;
    esac
}

# The srun --mpi plugin for this MPI, or nothing when Slurm lacks it.  Listed
# is not enough (Debian lists pmix without the PMIx library it loads), so each
# candidate is tried on a one-task step.
mpips_srun_mpi() {
    local flavor="$1" plugins p
    if [ -n "${MPIPS_SRUN_MPI:-}" ]; then echo "$MPIPS_SRUN_MPI"; return; fi
    plugins="$(srun --mpi=list 2>&1 | tr -s ' \t:' '\n\n\n')"
    if [ "$flavor" = mpich ]; then set -- pmi2 pmix; else set -- pmix pmi2; fi
    for p in "$@"; do
        grep -qx "$p" <<<"$plugins" || continue
        if timeout 60 srun --mpi="$p" -n 1 -N 1 --quiet true >/dev/null 2>&1; then
            echo "$p"; return
        fi
        _mpips_err "srun --mpi=$p is listed but does not work here"
    done
    return 0
}

# --- several nodes ------------------------------------------------------------
# The job's node count (1 outside Slurm: mpirun --host is the user's own).
mpips_nodes() { echo "${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}"; }

# mpips_nodes_env FLAVOR: what ranks on several nodes need from the MPI.
mpips_nodes_env() {
    local flavor="$1"
    [ "$(mpips_nodes)" -gt 1 ] || return 0
    if [ "$flavor" = openmpi ]; then
        # an include list without tcp (self,sm: one node's) reaches no other node
        case ",${OMPI_MCA_btl:-}," in
            ,,|*,tcp,*|,^*) ;;
            *) _mpips_log "OMPI_MCA_btl=$OMPI_MCA_btl reaches no other node: using $OMPI_MCA_btl,tcp"
               export OMPI_MCA_btl="$OMPI_MCA_btl,tcp" ;;
        esac
        if [ -n "${MPIPS_NET_IF:-}" ]; then
            export OMPI_MCA_btl_tcp_if_include="$MPIPS_NET_IF" OMPI_MCA_oob_tcp_if_include="$MPIPS_NET_IF"
            export PRTE_MCA_oob_tcp_if_include="$MPIPS_NET_IF"
        fi
        # mpirun learns that a node's daemon is out of reach (its link down, its
        # processes alive) from TCP keepalives: after 480 s by default, and until
        # then a job that aborted waits for it. Here: about 40 s.
        export PRTE_MCA_oob_tcp_keepalive_time="${PRTE_MCA_oob_tcp_keepalive_time:-20}"
        export PRTE_MCA_oob_tcp_keepalive_intvl="${PRTE_MCA_oob_tcp_keepalive_intvl:-5}"
        export PRTE_MCA_oob_tcp_keepalive_probes="${PRTE_MCA_oob_tcp_keepalive_probes:-4}"
    elif [ -n "${MPIPS_NET_IF:-}" ]; then   # MPICH: its launcher's, libfabric's and UCX's
        export HYDRA_IFACE="$MPIPS_NET_IF" FI_TCP_IFACE="$MPIPS_NET_IF" UCX_NET_DEVICES="$MPIPS_NET_IF"
    fi
}

# --- launching ----------------------------------------------------------------
_mpips_child=""
_mpips_stopped=""
_mpips_told=""   # the stop's outcome already said (the launcher's exit 3: a checkpoint)
_mpips_on_usr1() {
    _mpips_log "SIGUSR1: forwarding to the launcher (pid ${_mpips_child:-none})"
    [ -n "$_mpips_child" ] && kill -USR1 "$_mpips_child" 2>/dev/null
}
# SIGTERM or SIGINT to this shell (`scancel --signal=TERM --batch`, Ctrl-C): the
# same checkpoint, asked for with USR1 (mpirun, signalled TERM itself, kills its
# ranks at once), but the job ends there, not requeued, with status 128+signal.
_mpips_on_stop() {
    _mpips_stopped="$1"
    _mpips_log "SIG$1: asking for a checkpoint (USR1 to the launcher, pid ${_mpips_child:-none}); not requeued"
    [ -n "$_mpips_child" ] && kill -USR1 "$_mpips_child" 2>/dev/null
}

# mpips_launch N COMMAND...: run COMMAND on N ranks; returns its exit status.
mpips_launch() {
    local n="$1"; shift
    local flavor launcher="${MPIPS_LAUNCHER:-mpirun}" plugin="" ntasks rc
    local -a cmd
    flavor="$(mpips_mpi_flavor)"
    ntasks="${SLURM_NTASKS:-}"
    if [ -n "$ntasks" ] && [ "$n" -gt "$ntasks" ]; then
        _mpips_err "warning: $n ranks but the allocation has $ntasks tasks (submit with sbatch -n $n); oversubscribing"
    fi
    if [ "$launcher" = srun ]; then
        if [ -z "${SLURM_JOB_ID:-}" ] || ! command -v srun >/dev/null; then
            _mpips_err "MPIPS_LAUNCHER=srun outside a Slurm job: using mpirun"; launcher=mpirun
        else
            plugin="$(mpips_srun_mpi "$flavor")"
            if [ -z "$plugin" ]; then
                _mpips_err "MPIPS_LAUNCHER=srun: no working pmix/pmi2 plugin in this Slurm; using mpirun"
                launcher=mpirun
            fi
        fi
    elif [ "$launcher" != mpirun ]; then
        _mpips_err "MPIPS_LAUNCHER=$launcher: expected mpirun or srun"; return 2
    fi
    if [ "$launcher" = srun ]; then
        cmd=(srun --mpi="$plugin" -n "$n")
        [ -n "$ntasks" ] && [ "$n" -gt "$ntasks" ] && cmd+=(--overcommit)
    elif [ "$flavor" = openmpi ]; then
        # Slurm's binding and mpirun's would fight; ranks float on the cores.
        cmd=(mpirun --bind-to none -n "$n")
        [ -n "$ntasks" ] && [ "$n" -gt "$ntasks" ] && cmd+=(--map-by :OVERSUBSCRIBE)
    else
        cmd=(mpiexec -n "$n")
    fi
    # shellcheck disable=SC2206
    [ "$launcher" = mpirun ] && cmd+=(${MPIPS_MPIRUN_ARGS:-})
    mpips_nodes_env "$flavor"
    # each rank finds its node's MPS (mpips_start_mps): a folder per host
    [ -n "$_mpips_mps_dir" ] && cmd+=(bash -c 'export CUDA_MPS_PIPE_DIRECTORY="$0/$(hostname)/pipe"; exec "$@"' "$_mpips_mps_dir")
    cmd+=("$@")
    _mpips_log "MPI: $flavor; launcher: $launcher${plugin:+ --mpi=$plugin}; ranks: $n"
    _mpips_log "command: ${cmd[*]}"

    # In the background so that the USR1 trap runs at once, not after the run.
    trap _mpips_on_usr1 USR1
    trap '_mpips_on_stop TERM' TERM
    trap '_mpips_on_stop INT' INT
    "${cmd[@]}" &
    _mpips_child=$!
    while :; do
        wait "$_mpips_child"; rc=$?
        # A trapped signal interrupts `wait` with 128+n: keep waiting.
        if [ "$rc" -gt 128 ] && kill -0 "$_mpips_child" 2>/dev/null; then continue; fi
        break
    done
    _mpips_child=""
    trap - USR1 TERM INT
    _mpips_log "launcher exited with status $rc"
    if [ -n "$_mpips_stopped" ]; then   # checkpointed (3) or finished meanwhile: not requeued
        if [ "$rc" = 3 ]; then
            _mpips_log "stopped by SIG$_mpips_stopped after a checkpoint: the same job again resumes it"
            _mpips_told=1
            if [ "$_mpips_stopped" = TERM ]; then rc=143; else rc=130; fi
        fi
        return "$rc"
    fi
    # 3 = mpips.runtime.recovery.preemption.PREEMPTED_EXIT; any other failure is not retried.
    if [ "$rc" = 3 ] && [ "${MPIPS_REQUEUE:-1}" = 1 ] && [ -n "${SLURM_JOB_ID:-}" ]; then
        _mpips_log "requeueing job $SLURM_JOB_ID to resume in the same run directory"
        scontrol requeue "$SLURM_JOB_ID"
    fi
    return "$rc"
}

# Configuration fields, from mpips.config (imports neither torch nor MPI). A
# failure stops the job: without the list, MPIPS_<FIELD> settings would be
# dropped without a word (as MPIPS_DEVICE was, loading config.py on its own).
_mpips_fields() {
    "$MPIPS_PYTHON" -c 'from mpips.config import SHARED
from mpips.paradigms import option_specs
every = dict(SHARED)   # the shared settings, then each paradigm'"'"'s own (MPIPS_GROUPS, MPIPS_STALENESS)
for own in option_specs().values():
    for name, spec in own.items():
        every.setdefault(name, spec)
print(" ".join(name + (":bool" if isinstance(spec.default, bool) else "") for name, spec in every.items()))'
}

# --- GPUs ---------------------------------------------------------------------
_mpips_gpus_here() { nvidia-smi -L 2>/dev/null | grep -c '^GPU'; }

# mpips_start_mps N: start NVIDIA MPS for a job of N ranks when MPIPS_MPS
# asks for it (auto: when a node's ranks outnumber its GPUs), on every node
# of the job; its pipes and logs under $TMPDIR in a folder per host (one
# folder name for all: mpips_launch points each rank at its host's), stopped
# by mpips_stop_mps. One node: a daemon beside this shell. Several: a step
# of one task per node runs it in the foreground for the run (a daemon
# started by a step would end with the step).
_mpips_mps_dir=""
_mpips_mps_step=""
mpips_start_mps() {
    local n="$1" want="${MPIPS_MPS:-auto}" gpus nodes
    [ "${MPIPS_DEVICE:-cpu}" = cuda ] || return 0
    nodes="$(mpips_nodes)"
    case "$want" in
        0|no|off) return 0 ;;
        1|yes|on) ;;
        auto) gpus="$(_mpips_gpus_here)"
              [ "${gpus:-0}" -gt 0 ] && [ $(( (n + nodes - 1) / nodes )) -gt "$gpus" ] || return 0 ;;
        *) _mpips_err "MPIPS_MPS=$want: expected 1, 0 or auto"; return 2 ;;
    esac
    if ! command -v nvidia-cuda-mps-control >/dev/null; then
        _mpips_err "MPIPS_MPS: nvidia-cuda-mps-control not found; ranks sharing a GPU are time-sliced"
        return 0
    fi
    _mpips_mps_dir="$(mktemp -d "${TMPDIR:-/tmp}/mpips-mps.XXXXXX")"
    # shellcheck disable=SC2016
    local here='d="$0/$(hostname)"; mkdir -p "$d/pipe" "$d/log"
export CUDA_MPS_PIPE_DIRECTORY="$d/pipe" CUDA_MPS_LOG_DIRECTORY="$d/log"'
    if [ "$nodes" -gt 1 ]; then
        _mpips_on_each_node bash -c "$here; exec nvidia-cuda-mps-control -f" "$_mpips_mps_dir" &
        _mpips_mps_step=$!
        local waited=0   # every node's control pipe, before a rank looks for it
        while [ "$(find "$_mpips_mps_dir" -path '*/pipe/control' 2>/dev/null | wc -l)" -lt "$nodes" ]; do
            if [ "$waited" -ge 300 ] || ! kill -0 "$_mpips_mps_step" 2>/dev/null; then
                _mpips_err "MPS did not start on every node within 30 s; ranks sharing a GPU are time-sliced"
                mpips_stop_mps
                return 0
            fi
            sleep 0.1; waited=$((waited + 1))
        done
        _mpips_log "MPS started on $nodes nodes (pipes in $_mpips_mps_dir/HOST/pipe)"
    elif bash -c "$here; nvidia-cuda-mps-control -d" "$_mpips_mps_dir"; then
        _mpips_log "MPS started (pipes in $_mpips_mps_dir/$(hostname)/pipe)"
    else
        _mpips_err "MPS did not start; ranks sharing a GPU are time-sliced"
        rm -rf "$_mpips_mps_dir"; _mpips_mps_dir=""
    fi
}

# COMMAND... once on every node of the job, beside the steps running there
_mpips_on_each_node() {
    local nodes; nodes="$(mpips_nodes)"
    srun -N "$nodes" -n "$nodes" --ntasks-per-node=1 --overlap --quiet "$@"
}

mpips_stop_mps() {
    [ -n "$_mpips_mps_dir" ] || return 0
    if [ -n "$_mpips_mps_step" ]; then   # quit on every node, then the step ends
        _mpips_on_each_node bash -c \
            'CUDA_MPS_PIPE_DIRECTORY="$0/$(hostname)/pipe" nvidia-cuda-mps-control <<<quit' "$_mpips_mps_dir"
        timeout 30 tail --pid="$_mpips_mps_step" -f /dev/null || kill "$_mpips_mps_step" 2>/dev/null
        wait "$_mpips_mps_step" 2>/dev/null
        _mpips_mps_step=""
    else
        CUDA_MPS_PIPE_DIRECTORY="$_mpips_mps_dir/$(hostname)/pipe" nvidia-cuda-mps-control <<<quit
    fi
    _mpips_log "MPS stopped"
    rm -rf "$_mpips_mps_dir"; _mpips_mps_dir=""
}

# mpips_train PARADIGM [FLAGS...]: train with PARADIGM on the ranks it needs.
mpips_train() {
    local paradigm="$1"; shift
    local servers workers n name kind var flag run_dir
    local -a args=(--paradigm "$paradigm")
    servers="${MPIPS_SERVERS:-1}"
    workers="${MPIPS_WORKERS:-4}"
    args+=(--servers "$servers" --workers "$workers")
    [ -n "${MPIPS_CONFIG:-}" ] && args+=(--config "$MPIPS_CONFIG")
    local fields
    fields="$(_mpips_fields)" || { _mpips_err "cannot read the configuration fields of $MPIPS_ROOT/mpips"; return 2; }
    for name in $fields; do
        kind="${name#*:}"; name="${name%%:*}"
        case "$name" in paradigm|servers|workers|run_dir) continue ;; esac
        var="MPIPS_${name^^}"
        flag="--${name//_/-}"
        [ -n "${!var:-}" ] || continue
        if [ "$kind" = bool ]; then
            # MPIPS_NESTEROV=1 -> --nesterov, =0 -> --no-nesterov
            case "${!var,,}" in
                1|true|yes|on) args+=("$flag") ;;
                0|false|no|off) args+=("--no-${name//_/-}") ;;
                *) _mpips_err "$var=${!var}: expected 1 or 0"; return 2 ;;
            esac
        else
            args+=("$flag" "${!var}")
        fi
    done
    if [ -n "${MPIPS_RUN_DIR:-}" ]; then
        run_dir="$MPIPS_RUN_DIR"
    elif [ -n "${SLURM_ARRAY_JOB_ID:-}" ]; then
        run_dir="$MPIPS_ROOT/runs/${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
    elif [ -n "${SLURM_JOB_ID:-}" ]; then
        run_dir="$MPIPS_ROOT/runs/$SLURM_JOB_ID"
    fi
    if [ -n "${run_dir:-}" ]; then
        mkdir -p "$(dirname "$run_dir")"
        args+=(--run-dir "$run_dir")
        _mpips_log "run directory: $run_dir"
    fi
    # shellcheck disable=SC2206
    args+=("$@" ${MPIPS_ARGS:-})
    # the ranks these settings need (a paradigm's group servers, an evaluator): mpips says
    n="$("$MPIPS_PYTHON" -m mpips ranks "${args[@]}")" || return 2
    mpips_start_mps "$n" || return 2
    local rc=0 began
    began="$(date +%s)"
    mpips_launch "$n" "$MPIPS_PYTHON" -m mpips train "${args[@]}" || rc=$?
    mpips_stop_mps
    # Open MPI's mpirun exits 0 when it loses a node's daemon (it says so, and
    # ends the ranks): the run directory says whether the training finished
    if [ "$rc" = 0 ] && [ -n "${run_dir:-}" ] && [ -f "$run_dir/run.h5" ]; then
        local status
        status="$("$MPIPS_PYTHON" -c 'import sys
from mpips.io.checkpoint import run_attrs
print(run_attrs(sys.argv[1]).get("status", "incomplete"))' "$run_dir" 2>/dev/null)"
        if [ "$status" != finished ]; then
            _mpips_err "the launcher exited 0 but the run is ${status:-unreadable}, not finished: failed"
            rc=1
        fi
    fi
    # SIGTERM or SIGINT to mpirun itself as well (scancel and a time limit signal every
    # process of the job, Ctrl-C the terminal's foreground): it passes the signal on and
    # exits 1, their output cut, killing its ranks about half a second later (outside
    # Slurm) or leaving them to end (under it); or it dies of the signal (143: seen
    # across nodes while its daemons' srun was failing). Whether they checkpointed, the
    # run directory says once rank 0 has let go of its lock (mpips/io/rundir.py).
    if [ -n "$_mpips_stopped" ] && [ "$rc" != 0 ] && [ -z "$_mpips_told" ] && [ -n "${run_dir:-}" ]; then
        if command -v flock >/dev/null && [ -e "$run_dir/.lock" ]; then
            flock -w 60 "$run_dir/.lock" true 2>/dev/null
        fi
        if [ -n "$(find "$run_dir/checkpoints" -maxdepth 1 -name 'ckpt-*.h5' -newermt "@$began" 2>/dev/null)" ]; then
            _mpips_log "stopped by SIG$_mpips_stopped after a checkpoint (the launcher, signalled too, exited $rc): the same job again resumes it"
            rc=$((128 + $(kill -l "$_mpips_stopped")))
        else
            _mpips_log "stopped by SIG$_mpips_stopped without a checkpoint (the launcher, signalled too, ended its ranks first: exit $rc)"
        fi
    fi
    # a training that failed on several nodes: a node lost is requeued, not failed
    if [ -z "$_mpips_stopped" ] && [ "$rc" != 0 ] && [ "$rc" != 2 ] && [ "$rc" != 3 ] && [ "$(mpips_nodes)" -gt 1 ]; then
        mpips_after_lost_nodes "${run_dir:-}"
    fi
    return "$rc"
}

# mpips_lost_nodes: the job's nodes where a step no longer starts (30 s each).
mpips_lost_nodes() {
    local node lost=()
    for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
        timeout 30 srun -N 1 -n 1 -w "$node" --overlap --quiet true >/dev/null 2>&1 || lost+=("$node")
    done
    echo "${lost[*]}"
}

# mpips_after_lost_nodes RUN_DIR: after a failed training on several nodes, say
# which nodes are lost and which ranks ran there (run.h5's placement), and let
# the job be requeued rather than fail: Slurm requeues a job whose node
# stops answering (after SlurmdTimeout; --requeue), and the next start
# resumes from the last checkpoint on whatever nodes it gets. This shell
# waits for that, MPIPS_LOST_NODE_WAIT seconds at most (default 600), then
# requeues the job itself (MPIPS_REQUEUE=0: neither; the job fails).
mpips_after_lost_nodes() {
    local run_dir="$1" lost waited=0
    [ -n "${SLURM_JOB_ID:-}" ] || return 0
    lost="$(mpips_lost_nodes)"
    [ -n "$lost" ] || return 0
    _mpips_err "node(s) lost (no step starts there): $lost"
    if [ -n "$run_dir" ] && [ -f "$run_dir/run.h5" ]; then
        # shellcheck disable=SC2086
        "$MPIPS_PYTHON" -c 'import sys
from mpips.analysis.placement import node_line
from mpips.io.log import RunLog
nodes = RunLog(sys.argv[1]).by_node()
for node in sys.argv[2:]:
    print(f"[mpips job] ranks on {node}: {node_line(nodes.get(node, [])) or None}")' "$run_dir" $lost >&2
    fi
    [ "${MPIPS_REQUEUE:-1}" = 1 ] || return 0
    _mpips_log "waiting for Slurm to requeue the job (a lost node fails it), at most ${MPIPS_LOST_NODE_WAIT:-600} s"
    while [ "$waited" -lt "${MPIPS_LOST_NODE_WAIT:-600}" ]; do
        sleep 5; waited=$((waited + 5))
    done
    _mpips_log "requeueing job $SLURM_JOB_ID to resume from its last checkpoint"
    scontrol requeue "$SLURM_JOB_ID"
}
