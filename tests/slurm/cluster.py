"""A Slurm cluster of two nodes on this machine, as a user's would be: Debian's ``slurm-wlm`` and ``munge``
(installed with apt-get where missing), ``munged`` as the munge user, ``slurmctld``, and ``slurmd -N n1`` and
``slurmd -N n2`` on the loopback, each on a free port, with their configuration, state and logs in one folder.
Root only (the daemons and apt-get)."""

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time

NODES = ("n1", "n2")
PACKAGES = {"slurmctld": "slurm-wlm", "slurmd": "slurm-wlm", "sbatch": "slurm-wlm", "munged": "munge"}
HOSTS_LINE = "127.0.0.1 n1 n2  # docembed's test Slurm cluster\n"


def free_ports(n):
    """``n`` TCP ports nobody listens on, all distinct."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def install():
    """Debian's slurm-wlm and munge, where a command of theirs is missing."""
    missing = sorted({package for command, package in PACKAGES.items() if not shutil.which(command, path=PATH)})
    if missing:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-q"], check=True, env=env, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-q", *missing], check=True, env=env, capture_output=True)


PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])

SLURM_CONF = """\
ClusterName=docembed
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket,cred_expire=20
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
DefMemPerCPU=500
JobRequeue=1
SchedulerType=sched/builtin
ReturnToService=2
KillWait=30
InactiveLimit=0
MinJobAge=600
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
NodeName=n1 NodeAddr=127.0.0.1 CPUs=2 RealMemory=4000 Port={n1_port} State=UNKNOWN
NodeName=n2 NodeAddr=127.0.0.1 CPUs=2 RealMemory=4000 Port={n2_port} State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
"""


class Cluster:
    """The cluster's daemons, started by ``start`` and stopped by ``stop``, in a folder of their own that ``stop``
    removes (in /tmp: munged serves only a socket every user can reach); ``env`` is the environment its clients
    (sbatch, squeue, scontrol, scancel) read it from (``SLURM_CONF``)."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="docembed-slurm-")
        self.conf = os.path.join(self.root, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf, PATH=PATH)
        self.daemons = []
        self.added_hosts = False

    def start(self):
        install()
        munge = pwd.getpwnam("munge")
        munge_dir = os.path.join(self.root, "munge")
        os.makedirs(munge_dir)
        for name in ("state", "spool/n1", "spool/n2"):
            os.makedirs(os.path.join(self.root, name))
        key = os.path.join(munge_dir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        for path in (munge_dir, key):
            os.chown(path, munge.pw_uid, munge.pw_gid)
        os.chmod(self.root, 0o755)
        os.chmod(munge_dir, 0o755)  # munged refuses a socket others cannot reach
        self.daemons.append(subprocess.Popen(
            ["runuser", "-u", "munge", "--", "munged", "--foreground", f"--key-file={key}",
             f"--socket={munge_dir}/munge.socket", f"--pid-file={munge_dir}/munged.pid",
             f"--log-file={munge_dir}/munged.log", f"--seed-file={munge_dir}/munged.seed"],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.wait_for(lambda: os.path.exists(f"{munge_dir}/munge.socket"), "munged's socket")
        ctld, n1, n2 = free_ports(3)
        with open(self.conf, "w", encoding="utf-8") as f:
            f.write(SLURM_CONF.format(root=self.root, ctld_port=ctld, n1_port=n1, n2_port=n2))
        self.add_hosts()
        self.daemons.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", self.conf], env=self.env,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.wait_for(lambda: self.run("scontrol", "ping", check=False).returncode == 0, "slurmctld")
        for node in NODES:
            self.daemons.append(subprocess.Popen(["slurmd", "-D", "-N", node, "-f", self.conf], env=self.env,
                                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.wait_for(lambda: self.run("sinfo", "-h", "-o", "%T", check=False).stdout.split() == ["idle"],
                      "both nodes idle")
        return self

    def add_hosts(self):
        """The nodes' names on the loopback in /etc/hosts (where the rendezvous resolves the first node's name)."""
        with open("/etc/hosts", encoding="utf-8") as f:
            hosts = f.read()
        if all(any(node in line.split()[1:] for line in hosts.splitlines() if line.strip()) for node in NODES):
            return
        with open("/etc/hosts", "a", encoding="utf-8") as f:
            f.write(HOSTS_LINE)
        self.added_hosts = True

    def stop(self):
        """Every job cancelled, every daemon ended, the hosts line removed; whatever state start reached."""
        if os.path.exists(self.conf) and self.daemons:
            self.run("scancel", "--user=root", check=False)
        for daemon in reversed(self.daemons):
            daemon.terminate()
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        self.daemons = []
        if self.added_hosts:
            with open("/etc/hosts", encoding="utf-8") as f:
                hosts = f.read()
            with open("/etc/hosts", "w", encoding="utf-8") as f:
                f.write(hosts.replace(HOSTS_LINE, ""))
            self.added_hosts = False
        shutil.rmtree(self.root, ignore_errors=True)

    def run(self, *command, check=True):
        proc = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed ({proc.returncode}): {proc.stdout}{proc.stderr}")
        return proc

    def logs(self, lines=5):
        """The last ``lines`` of each daemon's log, for a failure's message (``stop`` removes them)."""
        tails = []
        for folder, _, names in os.walk(self.root):
            for name in sorted(n for n in names if n.endswith(".log")):
                with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                    tails.append(f"{name}:\n" + "".join(f.readlines()[-lines:]))
        return "\n".join(tails)

    def wait_for(self, ready, what, timeout=60):
        end = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > end:
                raise AssertionError(f"{what}: not ready after {timeout} s\n{self.logs()}")
            for daemon in self.daemons:
                if daemon.poll() is not None:
                    raise AssertionError(f"{daemon.args[0]} exited with {daemon.returncode}\n{self.logs()}")
            time.sleep(0.5)
