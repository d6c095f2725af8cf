"""The commands the bot's GitHub workflows run (`bot --help`'s second section), one module each."""
