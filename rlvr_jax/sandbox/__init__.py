"""The sandbox: where untrusted output runs, below both the graders (rlvr_jax/verify/) and
the environments (rlvr_jax/envs/), importing neither.

  bwrap.py       the containment (bubblewrap, seccomp, limits) and its threat model
  cgroup.py      a cgroup per sandbox (memory, pids, a CPU share), where the host allows it
  trainer_python.py  the trainer's interpreter bound read-only, for graders needing its libraries
  privilege.py   the sandbox's uid; what a killed trainer left (folders, cgroups)
  box_worker.py  the in-sandbox worker of one-shot jobs (forkserver or fresh)
  typed_json.py  Python values across the boundary with their types, and their equality
  pool.py        a pool of such workers with hard deadlines: `VerifierPool(kind)`
  codecs.py      the registry of job kinds (plug-ins register their codecs)
  firewall.py    the boundary between candidate-controlled data and the host
  session.py     long-lived sandboxes, one per episode: `SessionPool`
  session_server.py  the in-sandbox side of a session
  fleet.py       pools and sessions as Ray actors on a cluster of CPU machines (`.[ray]`)

No JAX import anywhere here."""
