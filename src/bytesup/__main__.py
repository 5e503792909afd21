from bytesup.cli.app import app

app(prog_name="bytesup")
