#!/usr/bin/env python3
"""Runs what `moec launch --mpirun -o SCRIPT` wrote, on this machine.

Usage: run-launched.py MOEC SCRIPT [moec launch arguments...]

Finds moerun next to moec in the build tree (tools/moerun/moerun), has moec
write the script and the plan with that moerun, then runs the script under
bash with Open MPI allowed to run as root and to oversubscribe the cores:
the script itself is what a cluster user would run.
"""
import os
import subprocess
import sys

moec, script, args = sys.argv[1], sys.argv[2], sys.argv[3:]
moerun = os.path.normpath(os.path.join(os.path.dirname(moec), "..", "moerun", "moerun"))
if not os.access(moerun, os.X_OK):
    sys.exit("run-launched.py: moerun is not built at %s (MOEC_RUNTIME=OFF?)" % moerun)
subprocess.run([moec, "launch", "--mpirun", "--moerun", moerun, "-o", script] + args, check=True)
# Open MPI keeps allocations until exit that LeakSanitizer reports in sanitized
# builds; they are not ours (the runtime's ctest entries turn leak checks off too).
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", ASAN_OPTIONS="detect_leaks=0")
sys.exit(subprocess.run(["bash", script], env=env).returncode)
