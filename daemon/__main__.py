from daemon.front.cli import main

main(prog_name="memstrata")
