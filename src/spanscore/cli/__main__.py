from spanscore.cli import main

main()
