"""The file MindSpore's compile cache hashes as "the entry script" while sporeflow's compile
cache is on (engine.compile_cache): it must import nothing. MindSpore walks the entry script's
imports at every cached compile and makes a module object of each (`importlib.util.
module_from_spec`); for `import sys` that resets the live `sys` module's attributes to their
start-up values (sys.stderr among them: a notebook's or a redirected stream is lost)."""
