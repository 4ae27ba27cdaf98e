(** Extraction of the executable core to OCaml.

    Naturals become OCaml native ints. The realizers below replace Coq's
    unary arithmetic by machine arithmetic; they agree with Coq's functions
    on every value below [max_int] (2^62 - 1), and the Python layer rejects
    inputs whose intermediate values could reach it (at most 2^20 devices,
    at most 2^50 global elements: every size, product, offset and traffic
    figure stays below 2^51). Division and modulo by zero follow Coq
    ([n / 0 = 0], [n mod 0 = n]); truncated subtraction and [pred] stop at
    0. Comparisons, [max], [min], [sub] and [pred] are written at type
    [int] so that OCaml compiles them to machine comparisons rather than
    calls to its polymorphic compare. *)
From Coq Require Import Arith Extraction ExtrOcamlBasic ExtrOcamlNatInt.
From VS Require Import Prelude Mesh Types Rules Checker Permute Semantics Validate Synth Search Traffic Pipeline Partial Pchecker Ppipeline Uchecker Upipeline Crossmesh Rounds Exchange Utraffic Puexchange Certify.
From VS Require Import Minimal.
From VS Require Import Eminimal.
From VS Require Import Puchecker.
From VS Require Import Boxes.
From VS Require Import Layoutchoice.
From VS Require Import Balance.
From VS Require Import Cover.
From VS Require Import Perrank.
From VS Require Import Rankrounds.

(** [Nat] of the prelude (what [+], [*], ... denote) *)
Extract Inlined Constant Coq.Init.Nat.add => "(+)".
Extract Inlined Constant Coq.Init.Nat.mul => "( * )".
Extract Constant Coq.Init.Nat.sub => "fun (n : int) (m : int) -> if n > m then n - m else 0".
Extract Constant Coq.Init.Nat.pred => "fun (n : int) -> if n > 0 then n - 1 else 0".
Extract Constant Coq.Init.Nat.div => "fun n m -> if m = 0 then 0 else n / m".
Extract Constant Coq.Init.Nat.modulo => "fun n m -> if m = 0 then n else n mod m".
Extract Inlined Constant Coq.Init.Nat.max => "(fun (x : int) (y : int) -> if x >= y then x else y)".
Extract Inlined Constant Coq.Init.Nat.min => "(fun (x : int) (y : int) -> if x <= y then x else y)".
Extract Inlined Constant Coq.Init.Nat.eqb => "(fun (x : int) (y : int) -> x = y)".
Extract Inlined Constant Coq.Init.Nat.leb => "(fun (x : int) (y : int) -> x <= y)".
Extract Inlined Constant Coq.Init.Nat.ltb => "(fun (x : int) (y : int) -> x < y)".
(** [Nat] of [PeanoNat] (what [Nat.div] etc. denote once [Arith] is imported) *)
Extract Inlined Constant PeanoNat.Nat.add => "(+)".
Extract Inlined Constant PeanoNat.Nat.mul => "( * )".
Extract Constant PeanoNat.Nat.sub => "fun (n : int) (m : int) -> if n > m then n - m else 0".
Extract Constant PeanoNat.Nat.pred => "fun (n : int) -> if n > 0 then n - 1 else 0".
Extract Constant PeanoNat.Nat.div => "fun n m -> if m = 0 then 0 else n / m".
Extract Constant PeanoNat.Nat.modulo => "fun n m -> if m = 0 then n else n mod m".
Extract Inlined Constant PeanoNat.Nat.max => "(fun (x : int) (y : int) -> if x >= y then x else y)".
Extract Inlined Constant PeanoNat.Nat.min => "(fun (x : int) (y : int) -> if x <= y then x else y)".
Extract Inlined Constant PeanoNat.Nat.eqb => "(fun (x : int) (y : int) -> x = y)".
Extract Inlined Constant PeanoNat.Nat.leb => "(fun (x : int) (y : int) -> x <= y)".
Extract Inlined Constant PeanoNat.Nat.ltb => "(fun (x : int) (y : int) -> x < y)".
Extract Constant PeanoNat.Nat.eq_dec => "fun (n : int) (m : int) -> n = m".

(** Stack-safe realizers for the list functions that run over every
    device (up to 2^20 of them): the plain extraction would overflow the
    native stack. Each computes the same list as the Coq definition.
    [seq] is tail-recursive (its loop, like [nth]'s, defined once: no
    closure per call); [map], [app] and [flat_map] build the first
    1000 elements (or, for [flat_map], the first 1000 pieces, each joined
    the same way) by direct recursion, so that short lists, the planner's,
    are built once, and the rest tail-recursively, by reversing: the stack
    depth stays bounded (at most 2000 frames of their own). *)
Extract Constant List.seq =>
  "let rec go start i acc = if i < start then acc else go start (i - 1) (i :: acc) in fun start len -> go start (start + len - 1) []".
Extract Constant List.map =>
  "let rec go k f l = match l with [] -> [] | x :: t -> if k = 0 then List.rev (List.rev_map f l) else let y = f x in y :: go (k - 1) f t in fun f l -> go 1000 f l".
Extract Constant List.flat_map =>
  "let rec cat k a b = match a with [] -> b | x :: t -> if k = 0 then List.rev_append (List.rev a) b else x :: cat (k - 1) t b in let rec go k f l = match l with [] -> [] | x :: t -> if k = 0 then List.rev (List.fold_left (fun acc x -> List.rev_append (f x) acc) [] l) else let y = f x in cat 1000 y (go (k - 1) f t) in fun f l -> go 1000 f l".
Extract Constant List.app =>
  "let rec go k l m = match l with [] -> m | x :: t -> if k = 0 then List.rev_append (List.rev l) m else x :: go (k - 1) t m in fun l m -> go 1000 l m".

(** [nth] by a tail-recursive loop, defined once (no closure or option
    allocated per call; [n] is never negative: it is a [nat]); the
    synthesizer reads axis sizes and dimensions with it constantly. *)
Extract Constant List.nth =>
  "let rec go n l d = match l with [] -> d | x :: t -> if n = 0 then x else go (n - 1) t d in go".

(** Every function the glue (bindings/glue.ml) calls, by its fully
    qualified name: a file defining a constant of the same short name
    cannot take its place (coq/check_trust.py checks each name against
    the table theorems' statements). *)
Extraction "verishard_core.ml"
  VS.Checker.check VS.Search.synthesize_best VS.Pipeline.plan_problem VS.Ppipeline.pplan_problem
  VS.Pchecker.pcheck VS.Traffic.lower_bound VS.Types.block_starts VS.Permute.permute_table
  VS.Semantics.movement VS.Uchecker.ucheck VS.Upipeline.uplan_problem VS.Uchecker.umovement
  VS.Crossmesh.xplan VS.Rounds.xrounds VS.Exchange.eplan_problem VS.Exchange.echeck
  VS.Exchange.ueplan_problem VS.Exchange.uecheck VS.Utraffic.ulower_bound VS.Puexchange.puplan_problem
  VS.Uchecker.ubound VS.Validate.bound VS.Certify.certify_split VS.Eminimal.emplan_problem
  VS.Puchecker.pucheck VS.Puchecker.puplan_checked VS.Boxes.bplan VS.Boxes.brounds
  VS.Layoutchoice.lplan VS.Balance.xplan_bal VS.Perrank.wplan VS.Perrank.rank_recv VS.Perrank.rank_send
  VS.Rounds.cut_box VS.Cover.bcovers VS.Rankrounds.rank_rounds.
