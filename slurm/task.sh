#!/bin/bash
# One training process of a run that slurm/train.sbatch starts through srun, one task each: "bash slurm/task.sh
# SCRIPT [flags …]". Under several processes its ranks are the task's (torchrun's variables, which Accelerate reads);
# a process killed by a signal other than SIGTERM (-9: the out-of-memory killer, a failing node) is named in one line,
# and its exit status makes srun (--kill-on-bad-exit) end the others, which would otherwise wait in a collective.
if [ -n "${WORLD_SIZE:-}" ]; then
    export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID NODE_RANK=$SLURM_NODEID
fi
python "$@" &
pid=$!
# a SIGTERM reaches every process of the step: the training process checkpoints and stops, this one waits for it
trap : TERM
wait "$pid" 2>/dev/null  # the line below names a killed process, bash's own notice would repeat it
status=$?
while kill -0 "$pid" 2>/dev/null; do
    wait "$pid" 2>/dev/null
    status=$?
done
if [ "$status" -gt 128 ] && [ "$status" -ne 143 ]; then
    echo "error: rank ${RANK:-0} of the run (node $SLURMD_NODENAME) was killed by signal $((status - 128)); the job" \
         "ends, and the same command resumes from the newest checkpoint" >&2
fi
exit "$status"
