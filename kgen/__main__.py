from kgen.cli import app

app(prog_name="kgen")
