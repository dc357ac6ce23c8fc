"""What a `tpurl` command does in the terminal around its subcommand: the Prefect API server
it starts or keeps, only its user's to use (api_server.py, kept_api.py, listener.py), or none
when nothing would run (finished.py), how Ctrl-C stops it (interrupts.py), and what it prints
when it fails (output.py).

The command line itself (the parser and the subcommands) is ``flows/cli.py``, the `tpurl`
console script; it stays at the top of ``flows/`` beside the other entry points, and this
package never imports it nor the operations it runs.
"""
