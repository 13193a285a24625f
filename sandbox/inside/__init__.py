"""Code that runs inside a sandbox (mounted read-only at /opt/motor-cortex).

Every module here uses only the standard library and ctypes, because it runs under the sandbox's
system ``/usr/bin/python3``; the host imports the same modules for their shared helpers.
"""
