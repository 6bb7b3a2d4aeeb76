"""The environment modules shipped with rlvr_jax (envs/world.py says what one is). Each runs
inside its episode's sandbox session under the system interpreter; the host only reads them.
  python_repl  a persistent Python session
  workspace    a directory of files to read, write, edit and run; hidden tests at the end
  api          an inventory API over a per-episode SQLite database; judged by its final rows
"""
