from isotax.cli import main

main()
