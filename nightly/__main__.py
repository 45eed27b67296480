from nightly.cli.main import main

main()
