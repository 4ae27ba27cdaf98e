(** Partial (unreduced) types: a value pending a reduction over some mesh
    axes. The type, what a distribution of a global array means under it,
    the collectives that reduce or create pending axes, their typing rules,
    data semantics and traffic. The proofs are in [Partialproof.v]. *)
From Coq Require Import List Arith Lia Bool.
From VS Require Import Prelude Mesh Types Rules Checker Semantics Exec Monoid.
Import ListNotations.

(** * Partial types *)

(** The mesh axes [paxes] over which the value is a pending reduction, and
    the array type the devices' local arrays have. [paxes = []] is an
    ordinary type. *)
Record ptype := mkptype { paxes : list nat; ptyp : atype }.

(** Well formed: the array type is, the pending axes are mesh axes, none
    twice, none used by the array type. *)
Definition pwf (m : mesh) (pt : ptype) : Prop :=
  wf m (ptyp pt) /\ NoDup (paxes pt) /\ (forall a, In a (paxes pt) -> a < length m) /\
  (forall a, In a (paxes pt) -> ~ In a (used (ptyp pt))).

Definition pwfb (m : mesh) (pt : ptype) : bool :=
  wfb m (ptyp pt) && nodupb (paxes pt) && forallb (fun a => a <? length m) (paxes pt)
  && forallb (fun a => negb (memb a (used (ptyp pt)))) (paxes pt).

(** * What a distribution means *)

(** The reduction, over the devices of [c]'s [A]-group (same coordinates as
    [c] off [A]; the [k]-th has number [k] on [A]), of [f]. *)
Definition gsum (M : cmonoid) (m : mesh) (A : list nat) (f : coords -> carrier M) (c : coords) : carrier M :=
  msum M (map (fun k => f (set_digits m A c k)) (seq 0 (nprod m A))).

(** A device's local array depends on the device only: two coordinate
    functions that agree everywhere give the same local elements. *)
Definition dev_ext {V} (m : mesh) (t : atype) (x : coords -> list nat -> V) : Prop :=
  forall c c' i, valid m c -> (forall a, c a = c' a) -> in_range m t i -> x c i = x c' i.

(** The local arrays [x] represent the global array [A] under [(P, t)]:
    for every device [c] and local index [i] in range, the reduction over
    [c]'s [P]-group of their elements at [i] is the element of [A] that [c]
    holds at [i] under [t]. With [P = []] this is "every device holds its
    block of [A]" ([Partialproof.represents_nil]). *)
Definition represents (M : cmonoid) (m : mesh) (pt : ptype) (A : list nat -> carrier M)
  (x : coords -> list nat -> carrier M) : Prop :=
  dev_ext m (ptyp pt) x /\
  forall c i, valid m c -> in_range m (ptyp pt) i ->
    gsum M m (paxes pt) (fun c' => x c' i) c = local A m (ptyp pt) c i.

(** * Collectives on partial types *)

Inductive pcoll :=
| PColl (op : coll)                  (* one of the four collectives, on axes outside the pending ones *)
| AllReduce (xs : list nat)          (* reduce over the pending axes [xs]: they become replicated *)
| ReduceScatter (d : nat) (xs : list nat)  (* reduce over [xs], each device keeping its slice along [d] *)
| ToPartial (xs : list nat).         (* replicated axes [xs] become pending *)

(** The pending axes left once [xs] is reduced. *)
Definition remove_axes (xs P : list nat) : list nat := filter (fun a => negb (memb a xs)) P.

(** Typing rules. The four collectives keep the pending axes, which the new
    type must not use; a reduce-scatter appends the reduced axes at the
    minor end of dimension [d], as a slice would, and asks of them what a
    slice asks. *)
Inductive pstep (m : mesh) : ptype -> pcoll -> ptype -> Prop :=
| pstep_coll : forall P t op t',
    step m t op t' -> (forall a, In a P -> ~ In a (used t')) ->
    pstep m (mkptype P t) (PColl op) (mkptype P t')
| pstep_allreduce : forall P t xs,
    xs <> [] -> NoDup xs -> (forall a, In a xs -> In a P) ->
    pstep m (mkptype P t) (AllReduce xs) (mkptype (remove_axes xs P) t)
| pstep_reducescatter : forall P t d xs D,
    nth_error t d = Some D -> xs <> [] -> NoDup xs -> (forall a, In a xs -> In a P) ->
    Nat.divide (nprod m xs) (lsize m D) ->
    pstep m (mkptype P t) (ReduceScatter d xs)
          (mkptype (remove_axes xs P) (set_nth t d (mkdim (axes D ++ xs) (gsize D))))
| pstep_topartial : forall P t xs,
    xs <> [] -> (forall a, In a xs -> a < length m) -> NoDup xs ->
    (forall a, In a xs -> ~ In a (used t)) -> (forall a, In a xs -> ~ In a P) ->
    pstep m (mkptype P t) (ToPartial xs) (mkptype (P ++ xs) t).

(** Why a step on a partial type is rejected. *)
Inductive perror :=
| CollError (e : error)      (* what [Rules.apply] reports, or the same reason for a new collective *)
| NotPending (a : nat)       (* a reduction names axis [a], which is not pending *)
| AxisPending (a : nat).     (* the step would use or add axis [a], which is pending *)

(** Why a reduction cannot be over the axes [xs] of the pending [P]: it
    names none, one twice, or one that is not pending. *)
Definition reduce_error (P xs : list nat) : option perror :=
  match xs with
  | [] => Some (CollError NoAxes)
  | _ =>
      if negb (nodupb xs) then Some (CollError RepeatedAxis) else
      match find (fun a => negb (memb a P)) xs with
      | Some a => Some (NotPending a)
      | None => None
      end
  end.

(** The typing rules as a function ([Partialproof.papply_spec]). *)
Definition papply (m : mesh) (pt : ptype) (op : pcoll) : result perror ptype :=
  let P := paxes pt in
  let t := ptyp pt in
  match op with
  | PColl c =>
      match apply m t c with
      | Err e => Err (CollError e)
      | Ok t' =>
          match find (fun a => memb a (used t')) P with
          | Some a => Err (AxisPending a)
          | None => Ok (mkptype P t')
          end
      end
  | AllReduce xs =>
      match reduce_error P xs with
      | Some e => Err e
      | None => Ok (mkptype (remove_axes xs P) t)
      end
  | ReduceScatter d xs =>
      match nth_error t d with
      | None => Err (CollError (BadDim d))
      | Some D =>
          match reduce_error P xs with
          | Some e => Err e
          | None =>
              if lsize m D mod nprod m xs =? 0
              then Ok (mkptype (remove_axes xs P) (set_nth t d (mkdim (axes D ++ xs) (gsize D))))
              else Err (CollError NotDivisible)
          end
      end
  | ToPartial xs =>
      match xs with
      | [] => Err (CollError NoAxes)
      | _ =>
          match find (fun a => length m <=? a) xs with
          | Some a => Err (CollError (AxisOutOfRange a))
          | None =>
              if negb (nodupb xs) then Err (CollError RepeatedAxis) else
              match find (fun a => memb a (used t)) xs with
              | Some a => Err (CollError (AxisInUse a))
              | None =>
                  match find (fun a => memb a P) xs with
                  | Some a => Err (AxisPending a)
                  | None => Ok (mkptype (P ++ xs) t)
                  end
              end
          end
      end
  end.

(** * Data semantics *)

(** One step on local arrays with values in [M]:
    - the four collectives move elements exactly as [Semantics.source] says
      ([Exec.exec_step]), whatever the pending axes;
    - all-reduce: device [c] gets, at every index, the reduction of the
      elements of its [xs]-group at that index;
    - reduce-scatter: device [c] gets the piece [mr xs c] along [d] of that
      reduction (local index [j] along [d] reads index
      [mr xs c * l' + j] of the group's arrays, [l'] the new local size, as
      a slice reads);
    - to-partial: the device numbered 0 in its [xs]-group keeps its
      elements, the others hold the unit. *)
Definition pexec_step (M : cmonoid) (m : mesh) (pt : ptype) (op : pcoll) (pt' : ptype)
  (x : coords -> list nat -> carrier M) : coords -> list nat -> carrier M :=
  match op with
  | PColl c => exec_step m (ptyp pt) c (ptyp pt') x
  | AllReduce xs => fun c i => gsum M m xs (fun c' => x c' i) c
  | ReduceScatter d xs => fun c i =>
      let i' := snd (source m (ptyp pt) (DynSlice d xs) (ptyp pt') c i) in
      gsum M m xs (fun c' => x c' i') c
  | ToPartial xs => fun c i => if mr m xs c =? 0 then x c i else munit M
  end.

(** Partial plans, their well-typed chains, and their execution (the type
    after each step given by [papply]; a rejected step stops the run). *)
Definition pplan := list pcoll.

Inductive pchain (m : mesh) : ptype -> pplan -> ptype -> Prop :=
| pchain_nil : forall pt, pchain m pt [] pt
| pchain_cons : forall pt op pt1 p pt',
    pstep m pt op pt1 -> pchain m pt1 p pt' -> pchain m pt (op :: p) pt'.

Fixpoint pexec (M : cmonoid) (m : mesh) (pt : ptype) (p : pplan) (x : coords -> list nat -> carrier M)
  : coords -> list nat -> carrier M :=
  match p with
  | [] => x
  | op :: p' =>
      match papply m pt op with
      | Ok pt1 => pexec M m pt1 p' (pexec_step M m pt op pt1 x)
      | Err _ => x
      end
  end.

(** * Traffic *)

(** Elements received per device by one step.
    - The four collectives: [Checker.recv], unchanged (they move the same
      elements whatever the values are).
    - Reduce-scatter over a group of [n = nprod xs] devices: each device
      ends with [size t'] elements (its block of the reduction) and needs
      the contribution of each of the [n - 1] other members for that block:
      [(n - 1) * size t'] (also what a ring reduce-scatter receives:
      [n - 1] rounds of one block).
    - All-reduce: done as a reduce-scatter of the local array into [n]
      pieces followed by an all-gather of the reduced pieces (the ring or
      Rabenseifner algorithm MPI and NCCL use). With [s = size t], each
      phase receives the local array less the piece the device keeps,
      [s - s / n] (pieces of [floor(s / n)] or one more when [n] does not
      divide [s]), so [2 * (s - s / n)]: [2 * s * (n - 1) / n] when [n]
      divides [s].
    - To-partial: no communication (a device zeroes its local array or
      keeps it). *)
Definition precv (m : mesh) (pt : ptype) (op : pcoll) (pt' : ptype) : nat :=
  match op with
  | PColl c => recv m (ptyp pt) c (ptyp pt')
  | AllReduce xs => 2 * (size m (ptyp pt) - size m (ptyp pt) / nprod m xs)
  | ReduceScatter _ xs => (nprod m xs - 1) * size m (ptyp pt')
  | ToPartial _ => 0
  end.
