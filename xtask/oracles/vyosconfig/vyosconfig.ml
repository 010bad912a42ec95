(* VyOS's own reading of config.boot text, for the project's differential tests.

   Protocol, so one process serves many cases: stdin holds cases, each a line
   with its length in bytes and then exactly that many bytes of config text;
   for each case stdout gets one JSON line:
     {"ok":true,"commands":"<Config_tree.render_commands of the tree>"}
     {"ok":false,"error":"<VyOS's message>","line":L,"column":C}
   (line and column are absent when VyOS gives none).

   Comments are dropped from the tree before rendering: the project reads
   no comments (docs/vyos-config-reading.md), and render_commands writes a
   comment unescaped, on its own line, where it could pass for a command.

   `vyosconfig load FILE` is the test guests' `load`: it reads FILE as VyOS's
   `load` hands it to libvyosconfig, prints nothing and exits 0 when VyOS
   reads it, or prints VyOS's message to stderr and exits 1 when VyOS
   refuses it. *)

open Vyos1x

let rec without_comments node =
  let data = Vytree.data_of_node node in
  let children = List.map without_comments (Vytree.children_of_node node) in
  Vytree.make_full { data with Config_tree.comment = None } (Vytree.name_of_node node) children

let verdict text =
  match Parser.from_string text with
  | tree ->
      let commands = Config_tree.render_commands (without_comments tree) [] in
      `Assoc [ ("ok", `Bool true); ("commands", `String commands) ]
  | exception Util.Syntax_error (position, message) ->
      let where =
        match position with
        | Some (line, column) -> [ ("line", `Int line); ("column", `Int column) ]
        | None -> []
      in
      `Assoc ([ ("ok", `Bool false); ("error", `String message) ] @ where)
  | exception Failure message -> `Assoc [ ("ok", `Bool false); ("error", `String message) ]

(* What libvyosconfig's [from_string] leaves in [get_error] (libvyosconfig
   lib/bindings.ml, make_syntax_error and from_string). *)
let libvyosconfig_error = function
  | Util.Syntax_error (Some (line, column), message) ->
      Printf.sprintf "Syntax error on line %d, character %d: %s" line column message
  | Util.Syntax_error (None, message) -> Printf.sprintf "Syntax error: %s" message
  | Failure message -> message
  | _ -> "Parse error"

(* vyos-1x python/vyos/configtree.py doubles every backslash of a quoted
   string that holds one and ends a line (escape_backslash, replace_backslash:
   the pattern ("[^"]*[\\][^"]*"\n|'[^']*[\\][^']*'\n)) before it hands the
   text to libvyosconfig. Written out by hand, so the oracle links nothing but
   libc and libm (the QEMU test guests have no libpcre): a string opened by
   [quote] at [start] matches up to the first [quote] after it when a
   backslash lies between and a newline follows. *)
let quoted_end text start quote =
  match String.index_from_opt text (start + 1) quote with
  | Some close
    when close + 1 < String.length text
         && text.[close + 1] = '\n'
         && String.contains (String.sub text (start + 1) (close - start - 1)) '\\' ->
      Some (close + 1)
  | _ -> None

let escape_backslash text =
  let buffer = Buffer.create (String.length text + 16) in
  let rec scan position =
    if position < String.length text then
      let c = text.[position] in
      match if c = '"' || c = '\'' then quoted_end text position c else None with
      | Some stop ->
          String.iter
            (fun c -> if c = '\\' then Buffer.add_string buffer "\\\\" else Buffer.add_char buffer c)
            (String.sub text position (stop - position + 1));
          scan (stop + 1)
      | None ->
          Buffer.add_char buffer c;
          scan (position + 1)
  in
  scan 0;
  Buffer.contents buffer

let load file =
  let channel = open_in_bin file in
  let text = really_input_string channel (in_channel_length channel) in
  close_in channel;
  match Parser.from_string (escape_backslash text) with
  | _ -> exit 0
  | exception error ->
      prerr_endline (libvyosconfig_error error);
      exit 1

let serve () =
  let rec loop () =
    match input_line stdin with
    | exception End_of_file -> ()
    | header ->
        let length = int_of_string (String.trim header) in
        let text = really_input_string stdin length in
        print_endline (Yojson.Safe.to_string (verdict text));
        flush stdout;
        loop ()
  in
  loop ()

let () =
  match Sys.argv with
  | [| _ |] -> serve ()
  | [| _; "load"; file |] -> load file
  | _ ->
      prerr_endline "usage: vyosconfig (cases on stdin) | vyosconfig load FILE";
      exit 2
