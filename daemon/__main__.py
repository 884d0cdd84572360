from daemon.cli import main

main(prog_name="memstrata")
