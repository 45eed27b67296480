from nightly.cli import main

main()
